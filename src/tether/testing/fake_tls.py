"""TLS for the fake provider: a throwaway self-signed certificate for 127.0.0.1 and the server
context that serves it (session tickets on, so clients can resume)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """Write `cert.pem` and `key.pem` for 127.0.0.1 / localhost into `directory` (openssl CLI);
    the certificate is its own CA, so clients trust it with SSL_CERT_FILE=cert.pem."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError(
            "the fake provider's TLS mode needs the openssl command (apt-get install openssl)"
        )
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "cert.pem", directory / "key.pem"
    result = subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"openssl could not make the fake provider's certificate: {result.stderr.strip()}"
        )
    return cert, key


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["http/1.1"])
    return context
