"""The private CA of ``remote pki``: certificates a strict verifier accepts.

Python 3.13's default TLS context verifies in X.509 strict mode, which refuses a chain whose
certificates lack key identifiers. A strict context is built here on any Python, so this is
checked on every version the package supports, not only where the default is strict.
"""

from __future__ import annotations

import shutil
import ssl
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pi_cross_session._internal.plugin.remote import pki


@pytest.fixture
def made(tmp_path: Path) -> pki.Pki:
    return pki.create(str(tmp_path / "pki"), ["127.0.0.1", "localhost"])


def test_every_certificate_names_its_key_and_its_issuer_key(made: pki.Pki) -> None:
    ca = x509.load_pem_x509_certificate(Path(made.ca).read_bytes())
    ca_key_id = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
    for path in (made.ca, made.server_cert, made.client_cert):
        cert = x509.load_pem_x509_certificate(Path(path).read_bytes())
        own = cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        assert own.digest == x509.SubjectKeyIdentifier.from_public_key(cert.public_key()).digest
        issuer = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
        assert issuer.key_identifier == ca_key_id


def _strict(context: ssl.SSLContext) -> ssl.SSLContext:
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    return context


def _step(side: ssl.SSLObject) -> bool:
    try:
        side.do_handshake()
    except ssl.SSLWantReadError:
        return False
    return True


@pytest.mark.skipif(not hasattr(ssl, "VERIFY_X509_STRICT"), reason="no strict mode in this ssl")
def test_a_mutual_tls_handshake_passes_strict_verification_on_both_sides(made: pki.Pki) -> None:
    client_context = _strict(ssl.create_default_context(cafile=made.ca))
    client_context.load_cert_chain(made.client_cert, made.client_key)
    server_context = _strict(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    server_context.load_cert_chain(made.server_cert, made.server_key)
    server_context.load_verify_locations(made.ca)
    server_context.verify_mode = ssl.CERT_REQUIRED
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_in, server_in = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context.wrap_bio(client_in, to_server, server_hostname="127.0.0.1")
    server = server_context.wrap_bio(server_in, to_client, server_side=True)
    done = (False, False)
    for _ in range(10):  # a TLS 1.3 handshake takes a few flights; more means it is stuck
        done = (_step(client), _step(server))
        server_in.write(to_server.read())
        client_in.write(to_client.read())
        if all(done):
            break
    assert done == (True, True)
    assert server.getpeercert() is not None


# -- a new server certificate under the same CA ----------------------------------------------------


def certificate(path: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(Path(path).read_bytes())


def hosts_of(cert: x509.Certificate) -> set[str]:
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(name.value) for name in names}


def same_key(a: x509.Certificate, b: x509.Certificate) -> bool:
    pem = serialization.Encoding.PEM
    info = serialization.PublicFormat.SubjectPublicKeyInfo
    return a.public_key().public_bytes(pem, info) == b.public_key().public_bytes(pem, info)


def test_reusing_the_ca_keeps_it_and_issues_a_server_certificate_for_the_new_hosts(
    made: pki.Pki, tmp_path: Path
) -> None:
    before = certificate(made.ca)
    old_server = certificate(made.server_cert)
    ca_pem = Path(made.ca).read_bytes()
    again = pki.create(str(tmp_path / "pki"), ["10.0.0.5", "hub.example.org"], reuse_ca=True)
    assert again.ca == made.ca
    after = certificate(again.ca)
    assert same_key(after, before)
    assert after.fingerprint(hashes.SHA256()) == before.fingerprint(hashes.SHA256())
    assert after.subject == before.subject
    server = certificate(again.server_cert)
    assert server.serial_number != old_server.serial_number
    assert not same_key(server, old_server)
    assert hosts_of(server) == {"10.0.0.5", "hub.example.org"}
    assert hosts_of(old_server) == {"127.0.0.1", "localhost"}
    for path in (again.server_cert, again.client_cert):
        issued = certificate(path)
        issued.verify_directly_issued_by(after)
        assert issued.issuer == after.subject
    # The CA's file is the one machines kept: they verify the new server with it.
    assert Path(again.ca).read_bytes() == ca_pem
    certificate(again.server_cert).verify_directly_issued_by(x509.load_pem_x509_certificate(ca_pem))


def test_without_reuse_a_new_ca_is_made(made: pki.Pki, tmp_path: Path) -> None:
    before = certificate(made.ca)
    again = pki.create(str(tmp_path / "pki"), ["127.0.0.1"])
    assert not same_key(certificate(again.ca), before)
    with pytest.raises((ValueError, InvalidSignature)):
        certificate(again.server_cert).verify_directly_issued_by(before)


def test_reusing_where_there_is_no_ca_makes_one(tmp_path: Path) -> None:
    made = pki.create(str(tmp_path / "fresh"), ["127.0.0.1"], reuse_ca=True)
    ca = certificate(made.ca)
    certificate(made.server_cert).verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


@pytest.mark.skipif(not hasattr(ssl, "VERIFY_X509_STRICT"), reason="no strict mode in this ssl")
def test_a_client_holding_the_old_ca_completes_a_handshake_with_the_new_server(
    made: pki.Pki, tmp_path: Path
) -> None:
    kept = tmp_path / "kept-ca.pem"
    kept.write_bytes(Path(made.ca).read_bytes())
    again = pki.create(str(tmp_path / "pki"), ["10.0.0.5"], reuse_ca=True)
    client_context = _strict(ssl.create_default_context(cafile=str(kept)))
    server_context = _strict(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    server_context.load_cert_chain(again.server_cert, again.server_key)
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_in, server_in = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context.wrap_bio(client_in, to_server, server_hostname="10.0.0.5")
    server = server_context.wrap_bio(server_in, to_client, server_side=True)
    done = (False, False)
    for _ in range(10):
        done = (_step(client), _step(server))
        server_in.write(to_server.read())
        client_in.write(to_client.read())
        if all(done):
            break
    assert done == (True, True)


def test_a_kept_ca_issues_under_its_own_name(tmp_path: Path) -> None:
    """Made under another name than this call's: the certificates name the CA as it is."""
    first = pki.create(str(tmp_path / "pki"), ["127.0.0.1"], name="first")
    again = pki.create(str(tmp_path / "pki"), ["10.0.0.5"], reuse_ca=True)
    ca = certificate(again.ca)
    assert ca.subject == certificate(first.ca).subject
    assert "first CA" in ca.subject.rfc4514_string()
    for path in (again.server_cert, again.client_cert):
        issued = certificate(path)
        assert issued.issuer == ca.subject
        assert "pi-cross-session" in issued.subject.rfc4514_string()


def test_a_ca_whose_key_does_not_match_is_refused_not_replaced(tmp_path: Path) -> None:
    """Every machine verifies the server with the CA: one that is there is never replaced
    quietly, even when its key is another CA's."""
    kept, other = tmp_path / "kept", tmp_path / "other"
    pki.create(str(kept), ["127.0.0.1"])
    pki.create(str(other), ["127.0.0.1"])
    before = (kept / "ca.pem").read_bytes()
    shutil.copy(other / "ca-key.pem", kept / "ca-key.pem")
    with pytest.raises(pki.PkiError):
        pki.create(str(kept), ["10.0.0.1"], reuse_ca=True)
    assert (kept / "ca.pem").read_bytes() == before


# -- a member server's certificate: asked for by a request, signed by the hub's CA ----------------


def usages_of(cert: x509.Certificate) -> set[x509.ObjectIdentifier]:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def public_bytes(key: object) -> bytes:
    assert isinstance(key, ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey)
    public = key.public_key() if isinstance(key, ec.EllipticCurvePrivateKey) else key
    return public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def test_the_hubs_own_server_certificate_also_dials_routes(made: pki.Pki) -> None:
    """In a cluster a server's certificate is a client's too: the other servers verify its
    routes with the CA. The gateway's stays a client's only."""
    server = usages_of(certificate(made.server_cert))
    assert server == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert server == set(pki.SERVER_USAGE)
    assert usages_of(certificate(made.client_cert)) == {ExtendedKeyUsageOID.CLIENT_AUTH}


def test_a_request_names_the_hosts_it_asks_for_and_holds_its_own_key() -> None:
    key_pem, csr_pem = pki.request(["hub2.example.org", "10.0.0.6", "::1"])
    assert sorted(pki.requested_hosts(csr_pem)) == ["10.0.0.6", "::1", "hub2.example.org"]
    key = serialization.load_pem_private_key(key_pem, password=None)
    assert public_bytes(x509.load_pem_x509_csr(csr_pem).public_key()) == public_bytes(key)


def test_as_many_hosts_as_allowed_pass() -> None:
    hosts = [f"10.0.0.{n}" for n in range(pki.MAX_REQUEST_HOSTS)]
    assert sorted(pki.requested_hosts(pki.request(hosts)[1])) == sorted(hosts)


def tampered(csr_pem: bytes) -> bytes:
    """The request with one letter of its subject changed after it was signed (still DER)."""
    der = x509.load_pem_x509_csr(csr_pem).public_bytes(serialization.Encoding.DER)
    assert der.count(b"pi-cross-session") == 1
    changed = der.replace(b"pi-cross-session", b"pi-cross-sessioN")
    return x509.load_der_x509_csr(changed).public_bytes(serialization.Encoding.PEM)


def csr_of(key: ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey, *names: str) -> bytes:
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pi-cross-session")])
    )
    if names:
        san = x509.SubjectAlternativeName([x509.DNSName(n) for n in names])
        builder = builder.add_extension(san, critical=False)
    algorithm = hashes.SHA256() if isinstance(key, ec.EllipticCurvePrivateKey) else None
    return builder.sign(key, algorithm).public_bytes(serialization.Encoding.PEM)


BAD_REQUESTS: dict[str, Callable[[pki.Pki], bytes]] = {
    "signature does not hold": lambda _: tampered(pki.request(["10.0.0.6"])[1]),
    "no names": lambda _: csr_of(ec.generate_private_key(ec.SECP256R1())),
    "too many names": lambda _: pki.request(
        [f"10.0.0.{n}" for n in range(pki.MAX_REQUEST_HOSTS + 1)]
    )[1],
    "not an EC key": lambda _: csr_of(ed25519.Ed25519PrivateKey.generate(), "hub2.example.org"),
    "garbage": lambda _: (
        b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"
    ),
    "empty": lambda _: b"",
    "a certificate": lambda made: Path(made.server_cert).read_bytes(),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_a_request_that_cannot_be_signed_is_refused(case: str, made: pki.Pki) -> None:
    csr_pem = BAD_REQUESTS[case](made)
    with pytest.raises(pki.PkiError):
        pki.requested_hosts(csr_pem)
    with pytest.raises(pki.PkiError):
        pki.sign_request(str(Path(made.ca).parent), csr_pem)


def test_only_a_directory_with_a_ca_signs(tmp_path: Path) -> None:
    with pytest.raises(pki.PkiError):
        pki.sign_request(str(tmp_path), pki.request(["10.0.0.6"])[1])


def test_a_signed_request_is_the_cas_certificate_of_the_requests_key(made: pki.Pki) -> None:
    key_pem, csr_pem = pki.request(["10.0.0.6", "hub2.example.org"])
    cert_pem = pki.sign_request(str(Path(made.ca).parent), csr_pem)
    ca_pem = Path(made.ca).read_bytes()
    pki.check_issued(ca_pem, cert_pem, key_pem)
    cert = x509.load_pem_x509_certificate(cert_pem)
    cert.verify_directly_issued_by(certificate(made.ca))
    assert hosts_of(cert) == {"10.0.0.6", "hub2.example.org"}
    assert usages_of(cert) == set(pki.SERVER_USAGE)
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    key = serialization.load_pem_private_key(key_pem, password=None)
    assert public_bytes(cert.public_key()) == public_bytes(key)
    # The hub never saw the key: the certificate is for the key that stayed on the server.
    assert key_pem not in Path(made.ca).parent.joinpath("server-key.pem").read_bytes()


def test_a_certificate_for_another_key_is_refused(made: pki.Pki) -> None:
    key_pem, _ = pki.request(["10.0.0.6"])
    _, other_csr = pki.request(["10.0.0.6"])
    cert_pem = pki.sign_request(str(Path(made.ca).parent), other_csr)
    with pytest.raises(pki.PkiError, match="another key"):
        pki.check_issued(Path(made.ca).read_bytes(), cert_pem, key_pem)
    # Nor is the hub's own server certificate this server's.
    with pytest.raises(pki.PkiError):
        pki.check_issued(Path(made.ca).read_bytes(), Path(made.server_cert).read_bytes(), key_pem)


def test_a_certificate_from_another_ca_is_refused(made: pki.Pki, tmp_path: Path) -> None:
    """The other CA bears the same name: only its signature tells it apart."""
    other = pki.create(str(tmp_path / "other"), ["127.0.0.1"])
    assert certificate(other.ca).subject == certificate(made.ca).subject
    key_pem, csr_pem = pki.request(["10.0.0.6"])
    cert_pem = pki.sign_request(str(Path(other.ca).parent), csr_pem)
    pki.check_issued(Path(other.ca).read_bytes(), cert_pem, key_pem)
    with pytest.raises(pki.PkiError, match="not the deployment CA's"):
        pki.check_issued(Path(made.ca).read_bytes(), cert_pem, key_pem)


@pytest.mark.parametrize("damaged", ["ca", "cert", "key"])
def test_garbage_is_no_issued_certificate(made: pki.Pki, damaged: str) -> None:
    key_pem, csr_pem = pki.request(["10.0.0.6"])
    parts = {
        "ca": Path(made.ca).read_bytes(),
        "cert": pki.sign_request(str(Path(made.ca).parent), csr_pem),
        "key": key_pem,
    }
    pki.check_issued(parts["ca"], parts["cert"], parts["key"])
    parts[damaged] = b"-----BEGIN GARBAGE-----\nAAAA\n-----END GARBAGE-----\n"
    with pytest.raises(pki.PkiError):
        pki.check_issued(parts["ca"], parts["cert"], parts["key"])
