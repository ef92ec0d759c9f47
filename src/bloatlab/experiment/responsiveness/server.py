"""The responsiveness test's server: nghttpd (Debian's nghttp2-server), HTTP/2 over TLS 1.3,
with the draft's objects: a 1-byte /small, an endless /large, and /upload, whose body nghttpd
reads and throws away before it answers (it answers only a complete request), and the
/.well-known/nq configuration. Everything it serves (a self-signed certificate, the files) is
in one directory in the network's own (removed with the network, even after a crash).

nghttpd runs in the foreground as one process, so the run ends the server by the pid it
started. Its flow-control windows are 16 MiB (-w/-W 24), not HTTP/2's 64 KiB, so uploads are
limited by the path and not by the server's receive window.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bloatlab import proc

LARGE_BYTES = 8 * 2**30  # the draft asks for at least 8 GB; sparse, so it costs no disk
AUTHORITY = "bloatlab.test"
WINDOW_BITS = 24


def make_site(root: Path, address: str, port: int) -> Path:
    """Directory `root` (new) with the certificate and the objects."""
    root.mkdir(parents=True)
    try:
        www = root / "www"
        (www / ".well-known").mkdir(parents=True)
        (www / "small").write_bytes(b"x")
        (www / "upload").write_bytes(b"")
        with open(www / "large", "wb") as f:
            f.truncate(LARGE_BYTES)
        base = f"https://{AUTHORITY}:{port}"
        (www / ".well-known" / "nq").write_text(json.dumps({"version": 1, "urls": {
            "small_download_url": f"{base}/small", "large_download_url": f"{base}/large",
            "upload_url": f"{base}/upload"}, "test_endpoint": address}))
        proc.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                  "-days", "2", "-subj", f"/CN={AUTHORITY}", "-keyout", str(root / "key.pem"), "-out", str(root / "cert.pem")])
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root


def argv(site: Path, address: str, port: int) -> list[str]:
    """The command that serves `site` on address:port."""
    return ["nghttpd", "-a", address, "-d", str(site / "www"), "-w", str(WINDOW_BITS), "-W", str(WINDOW_BITS),
            str(port), str(site / "key.pem"), str(site / "cert.pem")]


def remove(site: Path) -> None:
    shutil.rmtree(site, ignore_errors=True)
