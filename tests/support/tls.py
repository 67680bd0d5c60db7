"""A TLS relay on 127.0.0.1 with a certificate of its own certificate authority, made for the test.

:func:`make_authority` writes a CA and a server certificate for 127.0.0.1 and localhost (with the
``cryptography`` package); :class:`TlsRelay` accepts TLS connections with that certificate and
passes the bytes on, in both directions, to a plain upstream server (moto's, say). A client that
trusts the CA (``verify=`` its file) talks to the upstream through it; one that does not fails the
handshake (certificate verify failed), as it would with a server's self-made certificate.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import pathlib
import selectors
import socket
import ssl
import threading
import time
import urllib.parse

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["Authority", "TlsRelay", "make_authority"]


@attrs.frozen
class Authority:
    """The files of a test CA and of the server certificate it signed (PEM)."""

    ca: pathlib.Path  # the CA's certificate: what a client trusts
    certificate: pathlib.Path  # the server's certificate
    key: pathlib.Path  # the server's private key


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


_CA_USAGE = x509.KeyUsage(
    digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False, key_encipherment=False,
    data_encipherment=False, key_agreement=False, encipher_only=False, decipher_only=False,
)  # fmt: skip


def make_authority(directory: pathlib.Path) -> Authority:
    """A new CA and a server certificate for 127.0.0.1 and localhost it signed, written in ``directory``."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kinsumer test CA"))
        .issuer_name(_name("kinsumer test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_CA_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    authority = Authority(directory / "ca.pem", directory / "server.pem", directory / "server-key.pem")
    authority.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    authority.certificate.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    authority.key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return authority


class TlsRelay:
    """Accepts TLS on 127.0.0.1 (``endpoint``: ``https://127.0.0.1:port``) and relays each connection's bytes
    to ``upstream`` (an ``http://`` URL). ``handshakes_failed`` counts the clients that gave up the handshake.
    Stopped by :meth:`stop` (or leaving its ``with``): it stops listening and cuts the connections it holds."""

    def __init__(self, authority: Authority, upstream: str) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self._upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(authority.certificate, authority.key)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"https://127.0.0.1:{self._listener.getsockname()[1]}"
        self.handshakes_failed = 0
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._stopped = False
        self._accepting = threading.Thread(target=self._accept, name="tls-relay", daemon=True)
        self._accepting.start()

    def __enter__(self) -> TlsRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            sockets = list(self._sockets)
        _close(self._listener)  # shut down first: on Linux, close alone does not wake a blocked accept()
        for sock in sockets:  # each wakes its thread, which closes it: a socket closed under a thread that is
            _shut_down(sock)  # using it leaves a stale descriptor that the next socket made may take
        self._accepting.join(10)
        for thread in self._threads:
            thread.join(10)

    def _hold(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._stopped:
                sock.close()
                return False
            self._sockets.add(sock)
            return True

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed: stopped
                return
            thread = threading.Thread(target=self._serve, args=(client,), name="tls-relay-connection", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, client: socket.socket) -> None:
        secure = self._context.wrap_socket(client, server_side=True, do_handshake_on_connect=False)
        if not self._hold(secure):  # held from here: stop() cuts a handshake too
            return
        secure.settimeout(10)
        try:
            secure.do_handshake()
        except OSError:  # ssl.SSLError is one
            with self._lock:
                self.handshakes_failed += 1
            _close(secure)
            return
        secure.settimeout(None)
        try:
            upstream = socket.create_connection(self._upstream, timeout=10)
        except OSError:
            _close(secure)
            return
        if not self._hold(upstream):
            _close(secure)
            return
        _relay(secure, upstream)


_FLUSH_WAIT = 10.0  # seconds a relay passes on the last bytes of a side that ended


def _relay(secure: ssl.SSLSocket, upstream: socket.socket) -> None:
    """Copy bytes both ways between ``secure`` and ``upstream`` until either ends; then close both.

    One thread does all of it: an SSL connection must not be read on one thread while it is written on
    another (OpenSSL's connection objects are not safe for that; a TLS 1.3 session ticket sent meanwhile
    came out as an "unexpected message" alert to the client, once in a suite's run)."""
    secure.setblocking(False)
    upstream.setblocking(False)
    to_upstream, to_client = bytearray(), bytearray()
    with selectors.DefaultSelector() as selector:
        try:
            while True:
                selector.register(secure, selectors.EVENT_READ | (selectors.EVENT_WRITE if to_client else 0))
                selector.register(upstream, selectors.EVENT_READ | (selectors.EVENT_WRITE if to_upstream else 0))
                ready = secure.pending() > 0 or bool(selector.select())  # decrypted bytes wait in the SSL object
                selector.unregister(secure)
                selector.unregister(upstream)
                if not ready:
                    continue
                if not _receive(secure, to_upstream):
                    _flush(upstream, to_upstream)  # the client is done: what it sent goes on, then both close
                    return
                if not _receive(upstream, to_client):
                    _flush(secure, to_client)
                    return
                _send(secure, to_client)
                _send(upstream, to_upstream)
        except OSError:  # a side cut off, or stop() shut them down (ssl.SSLError is one)
            pass
        finally:
            _close(secure)
            _close(upstream)


def _receive(sock: socket.socket, into: bytearray) -> bool:
    """What ``sock`` has for us now, added to ``into``; False once it has ended."""
    try:
        data = sock.recv(65536)
    except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
        return True
    into += data
    return bool(data)


def _flush(sock: socket.socket, data: bytearray) -> None:
    """Send all of ``data`` (a side ended: the other still gets what was read from it), within 10 s."""
    deadline = time.monotonic() + _FLUSH_WAIT
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_WRITE)
        while data and time.monotonic() < deadline:
            selector.select(deadline - time.monotonic())
            _send(sock, data)


def _send(sock: socket.socket, data: bytearray) -> None:
    """Send what ``sock`` takes of ``data`` now; what it took leaves ``data``."""
    if not data:
        return
    try:
        sent = sock.send(data)
    except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
        return
    del data[:sent]


def _shut_down(sock: socket.socket) -> None:
    """Shut ``sock`` down both ways: a thread blocked on it wakes up. The plain socket's shutdown: an
    SSLSocket's own also drops its SSL object, which another thread may be using."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _close(sock: socket.socket) -> None:
    """Shut ``sock`` down and close it."""
    _shut_down(sock)
    sock.close()
