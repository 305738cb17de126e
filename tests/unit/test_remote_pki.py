"""The private CA of ``remote pki``: certificates a strict verifier accepts.

Python 3.13's default TLS context verifies in X.509 strict mode, which refuses a chain whose
certificates lack key identifiers. A strict context is built here on any Python, so this is
checked on every version the package supports, not only where the default is strict.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography import x509

from pi_cross_session.plugin.remote import pki


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
