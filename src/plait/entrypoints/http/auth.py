"""Bearer API keys: ``plk_`` + 43 random URL-safe characters, stored as SHA-256 only
(a key this long needs no slow hash: it cannot be guessed, only stolen)."""

from __future__ import annotations

import hashlib
import secrets
import time

from plait.application.ports import Clock, IdGenerator, KeyStore
from plait.domain.errors import ValidationError
from plait.domain.record import record
from plait.domain.service import ApiKey, Role
from plait.domain.session import Session

__all__ = ["Authenticator", "Principal", "create_key", "hash_key"]

PREFIX = "plk_"


@record
class Principal:
    name: str
    role: Role

    @property
    def admin(self) -> bool:
        return self.role is Role.ADMIN

    def may_see(self, session: Session) -> bool:
        return self.admin or session.owner == self.name


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


async def create_key(
    store: KeyStore, *, principal: str, role: Role, clock: Clock, ids: IdGenerator
) -> tuple[ApiKey, str]:
    """Store a new key for ``principal``; returns the record and the key itself (shown
    once, never stored)."""
    name = principal.strip() if isinstance(principal, str) else ""
    if not name or len(name) > 200 or any(ch.isspace() or ord(ch) < 32 for ch in name):
        raise ValidationError(
            "a principal name is 1-200 printable characters without spaces", principal=principal
        )
    secret = PREFIX + secrets.token_urlsafe(32)
    key = ApiKey(
        id=ids.new("key"),
        principal=name,
        role=role,
        key_hash=hash_key(secret),
        created_at=clock.now(),
    )
    await store.add_api_key(key)
    return key, secret


class Authenticator:
    """Resolves bearer keys to principals, caching hits briefly (keys are never edited;
    a key added elsewhere is found on its first use)."""

    def __init__(self, store: KeyStore, *, cache_seconds: float = 30.0) -> None:
        self._store = store
        self._cache: dict[str, tuple[float, Principal]] = {}
        self._ttl = cache_seconds

    async def principal(self, key: str) -> Principal | None:
        if not key.startswith(PREFIX) or len(key) > 200:
            return None
        digest = hash_key(key)
        hit = self._cache.get(digest)
        now = time.monotonic()
        if hit is not None and hit[0] > now:
            return hit[1]
        record = await self._store.find_api_key(digest)
        if record is None:
            return None
        found = Principal(record.principal, record.role)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[digest] = (now + self._ttl, found)
        return found
