"""A private CA and certificates for a small NATS deployment (``remote pki``).

Writes, into a directory of ours (0700), each key 0600: ``ca.pem``/``ca-key.pem`` (the CA, valid
10 years), ``server.pem``/``server-key.pem`` (for the given hosts: IP addresses or DNS names) and
``client.pem``/``client-key.pem`` (for servers that verify clients). ECDSA P-256 keys, SHA-256
signatures. Larger deployments use their own PKI; this is the first hour's.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pi_cross_session.protocol.errors import CrossSessionError
from pi_cross_session.security.io import fs

_VALID_DAYS = 3650


@dataclass(frozen=True, slots=True)
class Pki:
    """Where the files went."""

    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _issue(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    hosts: Sequence[str] = (),
    usage: x509.ObjectIdentifier | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        # Key identifiers on every certificate: Python 3.13's default TLS context verifies
        # strictly (X.509 strict mode), which refuses a chain whose certificates lack them.
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    )
    if hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False
        )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    return builder.sign(issuer_key, hashes.SHA256())


class PkiError(CrossSessionError):
    """A CA that is there but cannot be kept (damaged, or not one of ours)."""

    code = "bad_pki"


def _kept_ca(directory: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate] | None:
    try:
        key_pem = fs.read_registration_bytes(str(Path(directory) / "ca-key.pem"), max_bytes=65_536)
        cert_pem = fs.read_registration_bytes(str(Path(directory) / "ca.pem"), max_bytes=65_536)
    except fs.FileOperationError as exc:
        if exc.code == "ENOENT":
            return None
        raise
    # A CA that is there is never replaced quietly: every machine verifies the server with it.
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        key = None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or cert.public_key() != key.public_key():
        raise PkiError(
            f"the CA in {directory} is damaged or its key does not match it; restore it, or move "
            "that directory aside to make a new CA (every machine must then join again)"
        )
    return key, cert


def create(
    directory: str, hosts: Sequence[str], *, name: str = "pi-cross-session", reuse_ca: bool = False
) -> Pki:
    """Make the CA and both certificates in ``directory`` (created private if missing); with
    ``reuse_ca``, a CA already there is kept (machines that verify with it go on doing so) and
    only the certificates are made anew, e.g. for a server reached by a new name."""
    if not hosts:
        raise ValueError("name at least one host the server is reached by")
    Path(directory).mkdir(parents=True, exist_ok=True)
    fs.ensure_private_dir(directory)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA")])
    kept = _kept_ca(directory) if reuse_ca else None
    if kept is not None:
        ca_key, ca_cert = kept
        ca_name = ca_cert.subject
    else:
        ca_key = _key()
        ca_cert = _issue(f"{name} CA", ca_key, ca_name, ca_key, ca=True)
    server_key = _key()
    server = _issue(
        f"{name} NATS server",
        server_key,
        ca_name,
        ca_key,
        ca=False,
        hosts=hosts,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
    )
    client_key = _key()
    client = _issue(
        f"{name} gateway",
        client_key,
        ca_name,
        ca_key,
        ca=False,
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    pem = serialization.Encoding.PEM
    files = {
        "ca.pem": ca_cert.public_bytes(pem),
        "ca-key.pem": _pem_key(ca_key),
        "server.pem": server.public_bytes(pem),
        "server-key.pem": _pem_key(server_key),
        "client.pem": client.public_bytes(pem),
        "client-key.pem": _pem_key(client_key),
    }
    for file_name, data in files.items():
        fs.write_private_file(directory, file_name, data)

    def join(file_name: str) -> str:
        return str(Path(directory) / file_name)

    return Pki(
        ca=join("ca.pem"),
        server_cert=join("server.pem"),
        server_key=join("server-key.pem"),
        client_cert=join("client.pem"),
        client_key=join("client-key.pem"),
    )
