"""Where a live view listens: an address the user gives (--listen, --live), checked before
anything is built. Light to import: the command line reads it for its defaults."""

from __future__ import annotations

import ipaddress

from bloatlab.errors import BloatlabError

DEFAULT_LISTEN = "127.0.0.1:0"  # loopback, a free port


def parse_listen(text: str, field: str) -> tuple[str, int]:
    """ "ADDR:PORT", "ADDR", "[V6]:PORT", "[V6]" or ":PORT" (port 0: any free one) -> (address, port)."""
    if text.startswith("[") and "]" in text:
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":") if rest.startswith(":") or not rest else "x"
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, "0"
    host = host or DEFAULT_LISTEN.rpartition(":")[0]
    try:
        number = int(port or 0)
        ipaddress.ip_address(host)
    except ValueError:
        raise BloatlabError(f"{text!r} is not ADDR:PORT (an IP address and a port, like 127.0.0.1:8044)",
                            field=field) from None
    if not 0 <= number <= 65535:
        raise BloatlabError(f"port {number} is out of range (0-65535; 0 takes a free one)", field=field)
    return host, number


def check_listen(text: str, allow_remote: bool, field: str) -> tuple[str, int]:
    """The address to serve on; beyond loopback only when allowed."""
    host, port = parse_listen(text, field)
    if not ipaddress.ip_address(host).is_loopback and not allow_remote:
        raise BloatlabError(f"{host} is not a loopback address: the view would be reachable from other machines; "
                            "add --allow-remote to serve it there (its URL then carries a token)", field=field)
    return host, port
