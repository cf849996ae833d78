"""Which interface Ray, NCCL and Gloo use: the selection rules, and the reading of real interfaces.

The last test makes a network namespace of its own with interfaces (ib0, eth0, docker0,
a 169.254 address) and read it from a process inside it: root and iproute2 are needed, as for
the integration tier; they fail, never skip, without them.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verlenv.inside.cluster import netsel
from verlenv.inside.cluster.netsel import Address, Pick

LO = Address("lo", "127.0.0.1", 8)
LO6 = Address("lo", "::1", 128)
ETH0 = Address("eth0", "10.213.0.5", 24)
ETH0_6 = Address("eth0", "fe80::1", 64)
IB0 = Address("ib0", "192.168.7.5", 16)
DOCKER0 = Address("docker0", "172.17.0.1", 16)
BRIDGE = Address("br-3f2a", "172.18.0.1", 16)
LINK_LOCAL = Address("eth1", "169.254.3.4", 16)
# getifaddrs order: every IPv4 address by interface index, then IPv6
MACHINE = (LO, ETH0, IB0, DOCKER0, LO6, ETH0_6)


def _nccl(env: dict[str, str], addresses: tuple[Address, ...] = MACHINE) -> Pick:
    return netsel.nccl_pick(addresses, env)


def test_nccl_default_takes_ib_first_then_anything_but_docker_and_lo() -> None:
    assert _nccl({}).label == "ib0 192.168.7.5"
    assert _nccl({}, (LO, ETH0, DOCKER0, LO6)).label == "eth0 10.213.0.5"
    assert _nccl({}, (LO, DOCKER0, LO6)).label == "docker0 172.17.0.1"
    assert _nccl({}, (LO, LO6)).label == "lo 127.0.0.1"  # IPv6 loopback is never used


def test_nccl_socket_ifname_prefix_exclusion_exact_and_lists() -> None:
    assert _nccl({"NCCL_SOCKET_IFNAME": "eth"}).label == "eth0 10.213.0.5"
    assert _nccl({"NCCL_SOCKET_IFNAME": "^ib,lo"}).label == "eth0 10.213.0.5"
    assert _nccl({"NCCL_SOCKET_IFNAME": "^eth,ib,lo"}).label == "docker0 172.17.0.1"
    assert _nccl({"NCCL_SOCKET_IFNAME": "=eth"}).problem  # exact: there is no interface called "eth"
    assert _nccl({"NCCL_SOCKET_IFNAME": "=eth0"}).label == "eth0 10.213.0.5"
    assert _nccl({"NCCL_SOCKET_IFNAME": "docker,eth0:5000"}).label == "eth0 10.213.0.5"  # getifaddrs order wins
    assert _nccl({"NCCL_SOCKET_IFNAME": "e"}).label == "ib0 192.168.7.5"  # one character: NCCL ignores it


def test_nccl_socket_family_and_a_rule_that_matches_nothing() -> None:
    assert _nccl({"NCCL_SOCKET_FAMILY": "AF_INET6", "NCCL_SOCKET_IFNAME": "eth"}).label == "eth0 fe80::1"
    pick = _nccl({"NCCL_SOCKET_IFNAME": "enp"})
    assert pick.address == "" and "matches no interface here: NCCL fails to start" in pick.problem


def test_gloo_takes_its_variable_else_the_hostname_else_loopback() -> None:
    assert netsel.gloo_pick(MACHINE, {"GLOO_SOCKET_IFNAME": "eth0,ib0"}, "n1", ()).label == "eth0 10.213.0.5"
    missing = netsel.gloo_pick(MACHINE, {"GLOO_SOCKET_IFNAME": "eth9"}, "n1", ())
    assert "no interface eth9" in missing.problem
    resolved = netsel.gloo_pick(MACHINE, {}, "n1", ("10.213.0.5",))
    assert resolved.label == "eth0 10.213.0.5" and resolved.how == "hostname n1 resolves to 10.213.0.5"
    fallback = netsel.gloo_pick(MACHINE, {}, "n1", ())
    assert fallback.label == "lo 127.0.0.1" and "falls back to loopback" in fallback.how


def test_ray_pick_is_the_node_address_and_says_when_no_interface_holds_it() -> None:
    assert netsel.ray_pick(MACHINE, "10.213.0.5").label == "eth0 10.213.0.5"
    assert "not an address of this node" in netsel.ray_pick(MACHINE, "10.9.9.9").problem


@pytest.mark.parametrize(
    ("address", "found"),
    [
        (LO, ("loopback",)),
        (LINK_LOCAL, ("link-local",)),
        (ETH0_6, ("link-local",)),
        (DOCKER0, ("docker bridge",)),
        (BRIDGE, ("docker bridge",)),
        (Address("veth12ab", "172.17.0.5", 16), ("docker bridge",)),
        (ETH0, ()),
        (IB0, ()),
    ],
)
def test_hazards(address: Address, found: tuple[str, ...]) -> None:
    pick = Pick("nccl", address.interface, address.address, address.prefix, "test")
    assert netsel.hazards(pick) == found


def test_networks_of_picks() -> None:
    pick = Pick("gloo", "eth0", "10.213.0.5", 24, "test")
    assert pick.network == "10.213.0.0/24"
    assert Pick("gloo", "", "", -1, "test").network == ""


_names = st.sampled_from(["lo", "eth0", "eth1", "ens5", "docker0", "ib0", "ib1", "enp1s0"])


@given(st.lists(_names, min_size=1, max_size=6, unique=True))
def test_nccl_default_never_takes_lo_or_docker_when_another_interface_has_an_address(names: list[str]) -> None:
    addresses = tuple(Address(name, f"10.0.{i}.1", 24) for i, name in enumerate(names))
    pick = _nccl({}, addresses)
    others = [n for n in names if not n.startswith(("lo", "docker"))]
    if others:
        assert not pick.interface.startswith(("lo", "docker"))
        if any(n.startswith("ib") for n in names):
            assert pick.interface.startswith("ib")
    else:
        assert pick.interface == ("docker0" if "docker0" in names else "lo")


# -- real interfaces, in a namespace of the test's own ---------------------------------------------

_READ = """
import json
from verlenv.inside.cluster import netsel
addresses = netsel.read_addresses()
print(json.dumps({
    "addresses": [[a.interface, a.address, a.prefix, a.up] for a in addresses],
    "nccl": netsel.nccl_pick(addresses, {}).label,
    "nccl_eth": netsel.nccl_pick(addresses, {"NCCL_SOCKET_IFNAME": "^ib,lo"}).label,
    "resolved": [netsel.resolve_hostname(h) for h in ("localhost", "10.213.0.5", "10.99.0.1")],
}))
"""


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"ip {' '.join(args)}: {proc.stderr} (these tests need root and iproute2)"


@pytest.fixture
def namespace() -> Iterator[str]:
    assert os.geteuid() == 0, "reading real interfaces needs a network namespace of the test's own: run as root"
    name = f"verlenv-netsel-{secrets.token_hex(3)}"
    _ip("netns", "add", name)
    try:
        for dev, address in (
            ("eth0", "10.213.0.5/24"),
            ("ib0", "192.168.7.5/16"),
            ("docker0", "172.17.0.1/16"),
            ("eth1", "169.254.3.4/16"),
        ):  # veth pairs whose other ends stay down and bare: no dummy module needed
            _ip("-n", name, "link", "add", dev, "type", "veth", "peer", "name", f"x{dev}")
            _ip("-n", name, "addr", "add", address, "dev", dev)
            _ip("-n", name, "link", "set", dev, "up")
        _ip("-n", name, "link", "set", "lo", "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_addresses_read_from_real_interfaces_in_getifaddrs_order(namespace: str) -> None:
    proc = subprocess.run(
        ["ip", "netns", "exec", namespace, sys.executable, "-c", _READ], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    ipv4 = [a for a in found["addresses"] if ":" not in a[1]]
    assert ipv4 == [
        ["lo", "127.0.0.1", 8, True],
        ["eth0", "10.213.0.5", 24, True],
        ["ib0", "192.168.7.5", 16, True],
        ["docker0", "172.17.0.1", 16, True],
        ["eth1", "169.254.3.4", 16, True],
    ]
    assert ["lo", "::1", 128, True] in found["addresses"]
    assert found["addresses"].index(["lo", "::1", 128, True]) > len(ipv4) - 1  # IPv6 after every IPv4
    assert found["nccl"] == "ib0 192.168.7.5" and found["nccl_eth"] == "eth0 10.213.0.5"
    assert "127.0.0.1" in found["resolved"][0]
    assert found["resolved"][1:] == [["10.213.0.5"], []]  # an address no interface holds cannot be bound
