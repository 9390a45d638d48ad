// Package admin serves sluice.v1.LimitsService: the live state of a
// server's limiters (list and watch) and operator overrides that pin a
// limit for a while.
//
// Register it yourself, on the server and listener of your choice:
//
//	svc, err := admin.NewService(limits, admin.WithAuthorizer(checkOperator))
//	...
//	sluicev1.RegisterLimitsServiceServer(adminServer, svc)
//
// sluice never limits it (it is in interceptor.DefaultExempt). It can take
// a service down (an override of 0 rejects every call), so it must not face
// the internet: serve it on an internal listener and give it an authorizer.
// Without WithAuthorizer only callers on a loopback address are served.
package admin
