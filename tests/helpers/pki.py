"""Test certificates made with the openssl CLI: a CA, a server cert for 127.0.0.1, a token signer."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

DAYS = "2"


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    server_cert: Path
    server_key: Path


@dataclass(frozen=True)
class Signer:
    """A self-signed key pair whose cert goes into the registry's token rootcertbundle."""

    cert: Path
    key: Path

    def der(self) -> bytes:
        return _openssl("x509", "-in", str(self.cert), "-outform", "DER")

    def sign(self, data: bytes) -> bytes:
        """RS256: PKCS#1 v1.5 over SHA-256, what `openssl dgst -sha256 -sign` makes."""
        return _openssl("dgst", "-sha256", "-sign", str(self.key), stdin=data)


def _openssl(*args: str, stdin: bytes | None = None) -> bytes:
    proc = subprocess.run(["openssl", *args], input=stdin, capture_output=True, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout


def make_pki(directory: Path) -> Pki:
    """A CA (basicConstraints CA:TRUE) that signs a server cert with SAN IP:127.0.0.1 and DNS:localhost."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = directory / "ca.key", directory / "ca.crt"
    key, csr, cert, ext = (directory / n for n in ("server.key", "server.csr", "server.crt", "server.ext"))
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca_cert),
        "-days", DAYS, "-subj", "/CN=verlenv test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key), "-CAcreateserial",
        "-out", str(cert), "-days", DAYS, "-extfile", str(ext),
    )  # fmt: skip
    return Pki(ca_cert, cert, key)


def make_signer(directory: Path) -> Signer:
    directory.mkdir(parents=True, exist_ok=True)
    key, cert = directory / "token.key", directory / "token.crt"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
        "-days", DAYS, "-subj", "/CN=verlenv test token issuer",
    )  # fmt: skip
    return Signer(cert, key)
