"""Certificates for tests, made with the openssl command: a CA, and server certificates for 127.0.0.1 it signs."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)


def make_ca(directory: Path) -> dict[str, Path]:
    """A CA (`ca`, its key `ca_key`) and a server certificate for 127.0.0.1 it signed (`cert`, `key`)."""
    _openssl(directory, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
             "-days", "2", "-subj", "/CN=lagwatch-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    (directory / "ext.cnf").write_text(
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
        "authorityKeyIdentifier=keyid,issuer\nsubjectKeyIdentifier=hash\n"
    )
    cert, key = server_certificate(directory, "srv")
    return {"ca": directory / "ca.pem", "ca_key": directory / "ca.key", "cert": cert, "key": key}


def server_certificate(directory: Path, name: str) -> tuple[Path, Path]:
    """Another certificate for 127.0.0.1 from the CA in `directory` (a new key, a new serial): `<name>.pem`, `.key`."""
    _openssl(directory, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", "/CN=127.0.0.1")  # fmt: skip
    _openssl(directory, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", "2", "-extfile", "ext.cnf")  # fmt: skip
    return directory / f"{name}.pem", directory / f"{name}.key"
