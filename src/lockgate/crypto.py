"""Values sealed at rest for workflows declared with ``encrypt_steps=True``.

Each value is sealed with AES-256-GCM (``cryptography``'s ``AESGCM``): a random 96-bit
nonce per value, and the value's identity (a subject, a journal key, a field) as
associated data, so a ciphertext copied into another row does not open. A sealed value
is stored as a small JSON object (an *envelope*) that names its key and its identity::

    {"$sealed":"k2","for":["run_01..","charge#0","output"],"data":"<base64 nonce+ciphertext>"}

so that stored text says by itself whether it is sealed and under which key, and
tools that only show values (the CLI, ``get_run``) can open it, or show ``<encrypted>``
when no key they hold opens it. The engine, which acts on values, opens them against the
identity it expects (``Keyring.open``), never the one an envelope claims.

Keys are ``id:base64-of-32-bytes``, newest first: the first seals, every one opens.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, overload

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import DefinitionError, EncryptionKeyError, JournalDecryptionError

__all__ = [
    "ENCRYPTED",
    "KEYS_ENV",
    "KEY_ENV",
    "Keyring",
    "Sealer",
    "Undecryptable",
    "check_keys",
    "env_keys",
    "envelope_key",
    "event_identity",
    "generate_key",
    "is_sealed",
    "open_for_replay",
    "open_payload",
    "open_report",
    "parse_keys",
    "payload_identity",
    "reveal_row",
    "seal_payload",
    "transform",
]

KEYS_ENV = "LOCKGATE_ENCRYPTION_KEYS"
"""The environment variable an engine or client reads its keys from when none are passed."""
KEY_ENV = "LOCKGATE_ENCRYPTION_KEY"
"""One key instead, for a deployment that has never rotated (``KEYS_ENV`` lists several)."""

ENCRYPTED = "<encrypted>"
"""What a reader without a key that opens a value is shown in its place."""

_PREFIX = '{"$sealed":'
_KEY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_NONCE = 12  # bytes: the 96-bit nonce GCM is specified for
_ENVELOPE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)
_TEXT_FIELDS = frozenset({"error"})  # fields whose clear value is text, not JSON


class Undecryptable(Exception):
    """No listed key opens this envelope (unknown key id, wrong key, or tampered bytes)."""


@dataclass(frozen=True)
class _Key:
    id: str
    cipher: AESGCM


def is_sealed(text: object) -> bool:
    """Whether ``text`` is a sealed envelope (cheap: a prefix test)."""
    return isinstance(text, str) and text.startswith(_PREFIX)


def envelope_key(text: str) -> str | None:
    """The key id an envelope names (``None`` when ``text`` is not one)."""
    if not is_sealed(text):
        return None
    try:
        kid = json.loads(text)["$sealed"]
    except (ValueError, KeyError, TypeError):
        return None
    return kid if isinstance(kid, str) else None


def generate_key(key_id: str | None = None) -> str:
    """A new key in the ``id:base64`` form (a random id unless one is given)."""
    kid = key_id or f"k{secrets.token_hex(4)}"
    if not _KEY_ID.match(kid):
        raise EncryptionKeyError(f"key id {kid!r} must be 1-64 of A-Z a-z 0-9 _ . -")
    return f"{kid}:{base64.b64encode(AESGCM.generate_key(bit_length=256)).decode()}"


def parse_keys(spec: str | Sequence[str] | None, *, source: str) -> list[tuple[str, bytes]]:
    """``(id, 32 bytes)`` for each key of ``spec`` (comma-separated text or a list), newest first.

    ``source`` names where the keys came from, so that a bad one is reported there.
    """
    if spec is None:
        return []
    items = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else [str(s).strip() for s in spec]
    keys: list[tuple[str, bytes]] = []
    for n, item in enumerate(i for i in items if i):
        where = f"{source}: key {n + 1}"
        kid, sep, b64 = item.partition(":")
        if not sep or not _KEY_ID.match(kid):
            raise EncryptionKeyError(f"{where} must be 'id:base64-of-32-bytes' (id of A-Z a-z 0-9 _ . -)")
        try:
            raw = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise EncryptionKeyError(f"{where} ({kid!r}) is not valid base64") from None
        if len(raw) != 32:
            raise EncryptionKeyError(f"{where} ({kid!r}) is {len(raw)} bytes; AES-256 needs 32")
        if any(k == kid for k, _ in keys):
            raise EncryptionKeyError(f"{where}: key id {kid!r} is listed twice")
        keys.append((kid, raw))
    return keys


def env_keys() -> list[tuple[str, bytes]]:
    """The keys of ``LOCKGATE_ENCRYPTION_KEYS`` (newest first), or the one of ``LOCKGATE_ENCRYPTION_KEY``.

    Both may be set while a deployment moves from one to the other, as long as the single key
    is among the listed ones (the list then stands); anything else is an ``EncryptionKeyError``.
    """
    listed = parse_keys(os.environ.get(KEYS_ENV), source=KEYS_ENV)
    single = parse_keys(os.environ.get(KEY_ENV), source=KEY_ENV)
    if len(single) > 1:
        raise EncryptionKeyError(f"{KEY_ENV} holds one key ('id:base64'); list several, newest first, in {KEYS_ENV}")
    if single and listed and single[0] not in listed:
        raise EncryptionKeyError(
            f"{KEY_ENV} ({single[0][0]!r}) is not among the keys of {KEYS_ENV}: set one of the two, or list it there"
        )
    return listed or single


def _aad(identity: Sequence[str]) -> bytes:
    return "\x1f".join(identity).encode()


class Keyring:
    """The keys a process holds: the first seals new values, any of them opens old ones."""

    def __init__(self, keys: Iterable[tuple[str, bytes]] = ()) -> None:
        self._keys = [_Key(kid, AESGCM(raw)) for kid, raw in keys]
        self._by_id = {k.id: k for k in self._keys}

    @classmethod
    def load(cls, keys: str | Sequence[str] | None = None) -> Keyring:
        """The keys given, else those of the environment (``env_keys``; none when neither variable is set)."""
        if keys is not None:
            return cls(parse_keys(keys, source="encryption_keys"))
        return cls(env_keys())

    def __bool__(self) -> bool:
        return bool(self._keys)

    @property
    def ids(self) -> list[str]:
        """Key ids, newest first."""
        return [k.id for k in self._keys]

    @property
    def newest(self) -> str | None:
        return self._keys[0].id if self._keys else None

    def seal(self, plain: str, identity: Sequence[str]) -> str:
        """The envelope of ``plain`` under the newest key, bound to ``identity``."""
        if not self._keys:  # never a clear fallback
            raise EncryptionKeyError(
                f"no encryption key to seal a value with: set {KEY_ENV} or {KEYS_ENV}, or pass encryption_keys"
            )
        key = self._keys[0]
        nonce = os.urandom(_NONCE)
        data = nonce + key.cipher.encrypt(nonce, plain.encode(), _aad(identity))
        return _ENVELOPE.encode({"$sealed": key.id, "for": list(identity), "data": base64.b64encode(data).decode()})

    def open(self, text: str, identity: Sequence[str] | None = None) -> str:
        """The clear text of an envelope, checked against ``identity`` (default: the one it names).

        ``Undecryptable`` when no key opens it, including when it was sealed for another identity.
        """
        try:
            env = json.loads(text)
            kid, data = env["$sealed"], base64.b64decode(env["data"], validate=True)
            aad = _aad(identity if identity is not None else [str(p) for p in env["for"]])
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise Undecryptable("not a well-formed envelope") from None
        key = self._by_id.get(kid) if isinstance(kid, str) else None
        if key is None:
            raise Undecryptable(f"no key {kid!r}")
        try:
            plain = key.cipher.decrypt(data[:_NONCE], data[_NONCE:], aad)
        except (InvalidTag, ValueError):
            raise Undecryptable(f"key {kid!r} does not open it") from None
        return plain.decode()

    def reseal(self, text: str) -> str:
        """An envelope opened and sealed again under the newest key, for the identity it names."""
        plain = self.open(text)  # first: a malformed envelope is Undecryptable
        return self.seal(plain, [str(p) for p in json.loads(text)["for"]])

    def reveal(self, text: str | None) -> str | None:
        """Stored text as a reader shows it: envelopes opened, or ``<encrypted>`` where none opens.

        Works on a column that is an envelope and on JSON holding envelopes (event data,
        a failure report). A JSON field's stand-in is the JSON string ``"<encrypted>"``.
        """
        return transform(text, self._shown)

    def _shown(self, text: str, nested: bool) -> Any:
        field = _field(text)
        try:
            plain = self.open(text)
        except Undecryptable:
            return ENCRYPTED if nested or field in _TEXT_FIELDS else json.dumps(ENCRYPTED)
        if nested and field not in _TEXT_FIELDS:
            return json.loads(plain)
        return plain


def _field(text: str) -> str:
    try:
        return str(json.loads(text)["for"][-1])
    except (ValueError, KeyError, TypeError, IndexError):
        return ""


def transform(text: str | None, fn: Callable[[str, bool], Any]) -> str | None:
    """``text`` with each envelope in it replaced by ``fn(envelope, nested)``.

    A column that is itself an envelope becomes ``fn``'s text; envelopes inside JSON (as
    an object, or as a string holding one) are replaced in place and the JSON written
    again. Text without ``$sealed`` in it, or where ``fn`` changed nothing, is returned as it is.
    """
    if text is None or "$sealed" not in text:
        return text
    if is_sealed(text):
        return str(fn(text, False))
    try:
        data = json.loads(text)
    except ValueError:
        return text
    walked = _walk(data, fn)
    return text if walked == data else _ENVELOPE.encode(walked)


def _walk(value: Any, fn: Callable[[str, bool], Any]) -> Any:
    if isinstance(value, str):
        return fn(value, True) if is_sealed(value) else value
    if isinstance(value, dict):
        if "$sealed" in value:
            done = fn(_ENVELOPE.encode(value), True)
            return json.loads(done) if is_sealed(done) else done  # an envelope stays an object
        return {k: _walk(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, fn) for v in value]
    return value


class Sealer:
    """Seals and opens one run's values (run id, journal key, field as their identity).

    The executor and the client hold one per encrypted run; a run that is not encrypted
    has none, so its values pay nothing.
    """

    __slots__ = ("keyring", "run_id")

    def __init__(self, keyring: Keyring, run_id: str) -> None:
        self.keyring = keyring
        self.run_id = run_id

    @overload
    def seal(self, key: str, field: str, plain: str) -> str: ...

    @overload
    def seal(self, key: str, field: str, plain: None) -> None: ...

    def seal(self, key: str, field: str, plain: str | None) -> str | None:
        """``plain`` sealed as ``field`` of journal key ``key`` (``""``: the run itself)."""
        if plain is None:
            return None
        return self.keyring.seal(plain, (self.run_id, key, field))

    @overload
    def open(self, key: str, field: str, text: str) -> str: ...

    @overload
    def open(self, key: str, field: str, text: str | None) -> str | None: ...

    def open(self, key: str, field: str, text: str | None) -> str | None:
        """The clear value of a stored one; ``JournalDecryptionError`` naming run and key if none opens it.

        Clear text is returned as it is: a value stored before the workflow was encrypted.
        """
        if text is None or not is_sealed(text):
            return text
        try:
            return self.keyring.open(text, (self.run_id, key, field))
        except Undecryptable as exc:
            raise JournalDecryptionError(self.run_id, key or field, str(exc)) from None

    def open_entry(self, entry: dict[str, Any]) -> dict[str, Any]:
        """A journal row with its output and error message opened."""
        key = entry["step_key"]
        out, err = entry.get("output"), entry.get("error_message")
        if not (is_sealed(out) or is_sealed(err)):
            return entry
        return {**entry, "output": self.open(key, "output", out), "error_message": self.open(key, "error", err)}


def event_identity(event_id: str) -> tuple[str, str, str]:
    """A published event's data's identity: the event (sealed when an encrypted run publishes it)."""
    return (event_id, "", "data")


def payload_identity(workflow: str) -> tuple[str, str, str]:
    """A run payload's identity: its workflow (it is sealed before the gate decides the run)."""
    return (workflow, "", "payload")


def seal_payload(keyring: Keyring, workflow: str, text: str) -> str:
    """A run payload sealed for ``workflow`` (left as it is when it already is sealed)."""
    return text if is_sealed(text) else keyring.seal(text, payload_identity(workflow))


def open_payload(keyring: Keyring, row: dict[str, Any]) -> str:
    """A run row's payload in clear; ``JournalDecryptionError`` naming the run when no key opens it."""
    text: str = row["payload"]
    if not is_sealed(text):
        return text
    try:
        return keyring.open(text, payload_identity(row["workflow"]))
    except Undecryptable as exc:
        raise JournalDecryptionError(row["id"], "payload", str(exc)) from None


_SHOWN = ("payload", "output", "error_message", "input", "result", "data")


def reveal_row(keyring: Keyring, row: dict[str, Any]) -> dict[str, Any]:
    """A stored row as a reader shows it (see ``Keyring.reveal``); the row itself when nothing in it is sealed."""
    changed = {c: keyring.reveal(v) for c in _SHOWN if isinstance(v := row.get(c), str) and "$sealed" in v}
    return {**row, **changed} if changed else row


def check_keys(definitions: dict[str, Any], keyring: Keyring) -> None:
    """Refuse a boot where a workflow declares ``encrypt_steps`` and no key is held: never a clear fallback."""
    if keyring:
        return
    for name, defn in definitions.items():
        if getattr(defn, "encrypt_steps", False):
            raise DefinitionError(
                name,
                "encrypt_steps",
                f"needs an encryption key: pass encryption_keys=[...] or set {KEY_ENV} (or {KEYS_ENV}) "
                "(generate one with 'lockgate keys generate')",
            )


def open_report(keyring: Keyring, run_id: str, text: str) -> str:
    """A failure report's payload with the failed run's sealed values in it opened.

    The report carries the values as the failed run stored them (sealed for that run); the
    handler that receives it opens them here, and seals its own values in turn.
    """

    def opened(envelope: str, nested: bool) -> Any:
        try:
            plain = keyring.open(envelope)
        except Undecryptable as exc:
            raise JournalDecryptionError(run_id, "payload", str(exc)) from None
        return plain if _field(envelope) in _TEXT_FIELDS else json.loads(plain)

    return transform(text, opened) or text


def open_for_replay(
    keyring: Keyring,
    row: dict[str, Any],
    text: str,
    journal: dict[str, dict[str, Any]],
    sealer: Sealer | None,
    *,
    report: bool,
) -> tuple[str, Sealer | None, dict[str, dict[str, Any]]]:
    """What a run replays from, opened: its payload text, its sealer and its journal.

    A failure ``report`` of an encrypted run carries that run's sealed values: they are opened
    here, and the handler's run gets a sealer so that what it handles stays sealed in its own values.
    """
    if is_sealed(text):
        text = open_payload(keyring, row)
    elif report:
        text = open_report(keyring, str(row["id"]), text)
        if sealer is None:
            sealer = Sealer(keyring, str(row["id"]))
    if sealer is not None:
        journal = {k: sealer.open_entry(e) for k, e in journal.items()}
    return text, sealer, journal
