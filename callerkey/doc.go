// Package callerkey names the caller of a gRPC call, so that a quota or a
// fair share can be kept per caller: by the connection's IP address (IP,
// PeerIP), behind proxies you run by the address the nearest of them saw
// (IP with TrustedProxies), by the verified mTLS certificate
// (PeerIdentity), or by a metadata header the server can trust (Metadata).
//
// Every byte a caller sends is the caller's to choose. A key that a
// client can change at will gives it as many quotas as it likes: name
// callers by what the server verified, and believe a forwarded address
// only from the proxies you run.
package callerkey
