// The address a process tells its peers to reach it by (its endpoint for
// the master, servers and trainers): on a machine with several interfaces,
// the one its route to the master goes through, not whatever the bind
// address says (0.0.0.0 is no one's address).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace tessera {

// OK when `endpoint` is tcp://HOST:PORT with a host and a port in 1..65535,
// what a peer is reached by; INVALID_ARGUMENT saying what is wrong otherwise
// (a mistyped --master would otherwise wait out the register timeout).
Status CheckPeerEndpoint(const std::string& endpoint);
// The same for an address to listen on, where port 0 (or *) lets the system
// pick one; libzmq would take a port past 65535 modulo 65536.
Status CheckBindEndpoint(const std::string& endpoint);

// The IPv4 address this machine sends from to reach the host of `endpoint`
// (tcp://HOST:PORT, HOST a name or an address): the address of the
// interface its route goes through. Sends nothing (a UDP socket connected,
// then asked its own address). UNAVAILABLE when the host does not resolve or
// there is no route to it.
StatusOr<std::string> LocalAddressToward(const std::string& endpoint);

// The IPv4 addresses of this machine's interfaces that are up, loopback
// included.
std::vector<std::string> LocalAddresses();

// What to advertise: `given` when set, checked to be one of this machine's
// addresses (or a name resolving to one); else the bind endpoint's host when
// it is a specific address; else (a wildcard bind, 0.0.0.0 or *) the address
// toward `master_endpoint`. A given host that is not this machine's is
// INVALID_ARGUMENT naming it, the machine's addresses and the one the route
// to the master takes.
StatusOr<std::string> AdvertisedHost(const std::string& given, const std::string& bind_endpoint,
                                     const std::string& master_endpoint);

}  // namespace tessera
