package server

// CheckLimits exposes XDSLimits.check to the external tests, so a bound is
// tested as accepted without starting a server.
func CheckLimits(l XDSLimits) error { return l.check() }
