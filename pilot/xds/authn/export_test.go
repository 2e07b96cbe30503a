package authn

var AddrKey = addrKey
