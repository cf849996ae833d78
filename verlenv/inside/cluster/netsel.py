"""Which interface and address Ray, NCCL and Gloo use on a node, computed the way each of them does.

Standard library only: doctor runs with no extra packages. Interfaces come from
socket.if_nameindex(), IPv4 addresses and netmasks from ioctl(SIOCGIFADDR/SIOCGIFNETMASK), IPv6
from /proc/net/if_inet6. Addresses are kept in getifaddrs() order (every IPv4 address by
interface index, then every IPv6 one), the order NCCL walks.

- NCCL (misc/socket.cc, ncclFindInterfaces): NCCL_SOCKET_IFNAME is a comma list of prefixes; a
  leading `^` excludes them, a leading `=` asks for exact names. Unset: interfaces named ib*, then
  anything but docker* and lo*, then docker*, then lo. IPv6 loopback is never used;
  NCCL_SOCKET_FAMILY=AF_INET|AF_INET6 keeps one family. The first match is the bootstrap address.
- Gloo (torch ProcessGroupGloo): GLOO_SOCKET_IFNAME names interfaces (the first one's first
  address); unset, the first address the hostname resolves to that can be bound here, else loopback.
- Ray: the node's NodeManagerAddress, as the cluster reports it.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import socket
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SIOCGIFFLAGS = 0x8913
SIOCGIFADDR = 0x8915
SIOCGIFNETMASK = 0x891B
IFF_UP = 0x1
NCCL_DEFAULT_ORDER = ("ib", "^docker,lo", "docker", "lo")
DOCKER_PREFIXES = ("docker", "br-", "veth")
NETWORK_ENV = (
    "NCCL_SOCKET_IFNAME",
    "NCCL_SOCKET_FAMILY",
    "GLOO_SOCKET_IFNAME",
    "NCCL_IB_DISABLE",
    "NCCL_IB_HCA",
    "NCCL_NET",
    "NCCL_NET_PLUGIN",
)


@dataclass(frozen=True)
class Address:
    """One address of one interface."""

    interface: str
    address: str
    prefix: int
    up: bool = True

    @property
    def version(self) -> int:
        return ipaddress.ip_address(self.address).version

    @property
    def network(self) -> str:
        return str(ipaddress.ip_interface(f"{self.address}/{self.prefix}").network)


@dataclass(frozen=True)
class Pick:
    """What one library would use on one node: an address, how it got there, or why there is none."""

    who: str  # ray | nccl | gloo
    interface: str
    address: str
    prefix: int
    how: str
    problem: str = ""  # the library finds nothing usable (it fails to start)

    @property
    def label(self) -> str:
        return f"{self.interface or '?'} {self.address}" if self.address else "none"

    @property
    def network(self) -> str:
        if not self.address or self.prefix < 0:
            return ""
        return str(ipaddress.ip_interface(f"{self.address}/{self.prefix}").network)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def hazards(pick: Pick) -> tuple[str, ...]:
    """Why an address cannot carry traffic between nodes: loopback, a Docker bridge, link-local."""
    if not pick.address:
        return ()
    found = []
    ip = ipaddress.ip_address(pick.address)
    if ip.is_loopback:
        found.append("loopback")
    if ip.is_link_local:
        found.append("link-local")
    if pick.interface.startswith(DOCKER_PREFIXES):
        found.append("docker bridge")
    return tuple(found)


# -- reading this machine ---------------------------------------------------------------------


def read_addresses() -> tuple[Address, ...]:
    """This machine's addresses in getifaddrs() order: IPv4 by interface index, then IPv6."""
    names = [name for _, name in sorted(socket.if_nameindex())]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = {name: _flags(sock, name) for name in names}
        ipv4 = [a for a in (_ipv4(sock, name, flags[name]) for name in names) if a]
    return (*ipv4, *_ipv6(names, flags))


def _ifreq(sock: socket.socket, request: int, name: str) -> bytes:
    return fcntl.ioctl(sock.fileno(), request, struct.pack("256s", name.encode()[:15]))


def _flags(sock: socket.socket, name: str) -> int:
    try:
        return int(struct.unpack("H", _ifreq(sock, SIOCGIFFLAGS, name)[16:18])[0])
    except OSError:
        return 0


def _ipv4(sock: socket.socket, name: str, flags: int) -> Address | None:
    try:
        address = socket.inet_ntoa(_ifreq(sock, SIOCGIFADDR, name)[20:24])
        mask = socket.inet_ntoa(_ifreq(sock, SIOCGIFNETMASK, name)[20:24])
    except OSError:  # no IPv4 address on this interface
        return None
    prefix = ipaddress.ip_network(f"0.0.0.0/{mask}").prefixlen
    return Address(name, address, prefix, bool(flags & IFF_UP))


def _ipv6(names: Sequence[str], flags: Mapping[str, int], table: Path = Path("/proc/net/if_inet6")) -> list[Address]:
    try:
        rows = [line.split() for line in table.read_text().splitlines()]
    except OSError:
        return []
    found = []
    for row in sorted((r for r in rows if len(r) == 6), key=lambda r: int(r[1], 16)):
        text = ":".join(row[0][i : i + 4] for i in range(0, 32, 4))
        found.append(Address(row[5], str(ipaddress.ip_address(text)), int(row[2], 16), bool(flags.get(row[5], 0) & 1)))
    return [a for a in found if a.interface in names]


def resolve_hostname(hostname: str) -> tuple[str, ...]:
    """Addresses ``hostname`` resolves to that a socket can bind here: Gloo's default candidates, in order."""
    try:
        infos = socket.getaddrinfo(hostname, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
    except OSError:
        return ()
    bindable = []
    for family, kind, _, _, sockaddr in infos:
        with contextlib.suppress(OSError), socket.socket(family, kind) as sock:
            sock.bind((sockaddr[0], 0))
            if sockaddr[0] not in bindable:
                bindable.append(str(sockaddr[0]))
    return tuple(bindable)


# -- the selection rules ----------------------------------------------------------------------


def _matches(name: str, entries: Iterable[str], exact: bool) -> bool:
    return any(name == entry if exact else name.startswith(entry) for entry in entries)


def nccl_matching(rule: str, addresses: Sequence[Address], family: int = 0) -> list[Address]:
    """NCCL's findInterfaces: one address per interface, in getifaddrs order, that ``rule`` admits."""
    exclude = rule.startswith("^")
    rule = rule[1:] if exclude else rule
    exact = rule.startswith("=")
    rule = rule[1:] if exact else rule
    entries = [part.split(":")[0] for part in rule.split(",") if part]
    found: list[Address] = []
    for address in addresses:
        if family and address.version != family:
            continue
        if address.version == 6 and ipaddress.ip_address(address.address).is_loopback:
            continue
        admitted = _matches(address.interface, entries, exact) != exclude
        if admitted and address.interface not in {f.interface for f in found}:
            found.append(address)
    return found


def _family(env: Mapping[str, str]) -> int:
    return {"AF_INET": 4, "AF_INET6": 6}.get(env.get("NCCL_SOCKET_FAMILY", ""), 0)


def nccl_pick(addresses: Sequence[Address], env: Mapping[str, str]) -> Pick:
    rule = env.get("NCCL_SOCKET_IFNAME", "")
    family = _family(env)
    if len(rule) > 1:  # NCCL ignores a one-character value
        found = nccl_matching(rule, addresses, family)
        how = f"NCCL_SOCKET_IFNAME={rule}"
        if not found:
            return Pick("nccl", "", "", -1, how, f"{how} matches no interface here: NCCL fails to start")
        return _pick("nccl", found[0], how)
    for step in NCCL_DEFAULT_ORDER:
        found = nccl_matching(step, addresses, family)
        if found:
            return _pick(
                "nccl", found[0], f"NCCL's default (ib*, else not docker*/lo*, else docker*, else lo) took {step}"
            )
    return Pick("nccl", "", "", -1, "default", "no interface with an address: NCCL fails to start")


def gloo_pick(addresses: Sequence[Address], env: Mapping[str, str], hostname: str, resolved: Sequence[str]) -> Pick:
    names = [n for n in env.get("GLOO_SOCKET_IFNAME", "").split(",") if n]
    if names:
        how = f"GLOO_SOCKET_IFNAME={env['GLOO_SOCKET_IFNAME']}"
        found = [a for a in addresses if a.interface == names[0]]
        if not found:
            return Pick("gloo", names[0], "", -1, how, f"{how}: no interface {names[0]} with an address here")
        return _pick("gloo", found[0], how)
    if resolved:
        return _pick("gloo", _holder(addresses, resolved[0]), f"hostname {hostname} resolves to {resolved[0]}")
    how = f"hostname {hostname} does not resolve to an address of this node: Gloo falls back to loopback"
    return _pick("gloo", _holder(addresses, "127.0.0.1"), how)


def ray_pick(addresses: Sequence[Address], node_ip: str) -> Pick:
    holder = _holder(addresses, node_ip)
    if not holder.interface:
        return _pick("ray", holder, "the node's NodeManagerAddress", f"{node_ip} is not an address of this node")
    return _pick("ray", holder, "the node's NodeManagerAddress")


def _holder(addresses: Sequence[Address], ip: str) -> Address:
    """The address record holding ``ip`` (its interface and prefix), or a bare one when none does."""
    for address in addresses:
        if ipaddress.ip_address(address.address) == ipaddress.ip_address(ip):
            return address
    return Address("", ip, 8 if ipaddress.ip_address(ip).is_loopback else -1)


def _pick(who: str, address: Address, how: str, problem: str = "") -> Pick:
    return Pick(who, address.interface, address.address, address.prefix, how, problem)


def picks(
    addresses: Sequence[Address], env: Mapping[str, str], hostname: str, resolved: Sequence[str], node_ip: str
) -> dict[str, Pick]:
    """The three picks of one node."""
    return {
        "ray": ray_pick(addresses, node_ip),
        "nccl": nccl_pick(addresses, env),
        "gloo": gloo_pick(addresses, env, hostname, resolved),
    }
