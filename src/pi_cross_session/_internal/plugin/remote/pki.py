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
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pi_cross_session._internal.protocol.errors import CrossSessionError
from pi_cross_session._internal.security.io import fs

_VALID_DAYS = 3650
#: A server's certificate serves clients and, in a cluster, dials its routes to the others (which
#: verify it with the CA: only a server the deployment signed joins the cluster).
SERVER_USAGE = (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH)
#: The most names one server's certificate request may ask for.
MAX_REQUEST_HOSTS = 8


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
    public_key: ec.EllipticCurvePublicKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    hosts: Sequence[str] = (),
    usage: Sequence[x509.ObjectIdentifier] = (),
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        # Key identifiers on every certificate: Python 3.13's default TLS context verifies
        # strictly (X.509 strict mode), which refuses a chain whose certificates lack them.
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    )
    if hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False
        )
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usage)), critical=False)
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
        ca_cert = _issue(f"{name} CA", ca_key.public_key(), ca_name, ca_key, ca=True)
    server_key = _key()
    server = _issue(
        f"{name} NATS server",
        server_key.public_key(),
        ca_name,
        ca_key,
        ca=False,
        hosts=hosts,
        usage=SERVER_USAGE,
    )
    client_key = _key()
    client = _issue(
        f"{name} gateway",
        client_key.public_key(),
        ca_name,
        ca_key,
        ca=False,
        usage=(ExtendedKeyUsageOID.CLIENT_AUTH,),
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


def request(hosts: Sequence[str]) -> tuple[bytes, bytes]:
    """A new server key and a certificate request for ``hosts`` (both PEM): the key stays on the
    server that made it; the hub signs the request (:func:`sign_request`)."""
    key = _key()
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pi-cross-session")]))
        .add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _pem_key(key), csr.public_bytes(serialization.Encoding.PEM)


def requested_hosts(csr_pem: bytes) -> list[str]:
    """The names a certificate request asks for, once its signature holds; :class:`PkiError`
    when it does not, or it asks for none or too many."""
    try:
        csr = x509.load_pem_x509_csr(csr_pem)
        names = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        raise PkiError("the certificate request cannot be read") from None
    if not csr.is_signature_valid or not isinstance(csr.public_key(), ec.EllipticCurvePublicKey):
        raise PkiError("the certificate request is not signed by an EC key of its own")
    hosts = [str(n) for n in names.get_values_for_type(x509.IPAddress)]
    hosts += names.get_values_for_type(x509.DNSName)
    if not hosts or len(hosts) > MAX_REQUEST_HOSTS:
        raise PkiError(f"a server's certificate names 1 to {MAX_REQUEST_HOSTS} hosts")
    return hosts


def sign_request(directory: str, csr_pem: bytes, *, name: str = "pi-cross-session") -> bytes:
    """The CA in ``directory`` signs the server certificate ``csr_pem`` asks for (PEM)."""
    kept = _kept_ca(directory)
    if kept is None:
        raise PkiError(f"no CA in {directory}")
    ca_key, ca_cert = kept
    hosts = requested_hosts(csr_pem)
    public_key = x509.load_pem_x509_csr(csr_pem).public_key()
    assert isinstance(public_key, ec.EllipticCurvePublicKey)  # requested_hosts checked it
    cert = _issue(
        f"{name} NATS server",
        public_key,
        ca_cert.subject,
        ca_key,
        ca=False,
        hosts=hosts,
        usage=SERVER_USAGE,
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def check_issued(ca_pem: bytes, cert_pem: bytes, key_pem: bytes) -> None:
    """:class:`PkiError` unless ``cert_pem`` is the CA's certificate of ``key_pem``'s key (what
    a new server checks of the certificate the hub signed for it)."""
    try:
        ca = x509.load_pem_x509_certificate(ca_pem)
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        raise PkiError("the hub's certificate for this server is not the deployment CA's") from None
    if cert.public_key() != key.public_key():
        raise PkiError("the hub's certificate for this server is for another key")
