"""How lagwatch's requests to subscribers go out safely: the address guard (no SSRF), a subscription's TLS
settings, and webhook signatures (which receivers check too)."""
