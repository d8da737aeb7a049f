"""Who a bearer token names: the people of a server's tokens file, or the one token of $BISECT_TOKEN / --token-file.

The tokens file (TOML, `--tokens-file`): one `name = "token"` line per person, and `admins`, the names that may
act on every job (the others act only on the jobs they submitted):

    admins = ["alice"]
    alice = "f3b9…"
    bob = "77c1…"

A single token ($BISECT_TOKEN or --token-file) names one person, `default`, an admin: the whole team shares it.
A given token is compared with every configured one (hmac.compare_digest over their SHA-256 digests, so that
neither the length nor the first differing byte of a token shows in the time taken), and no token is ever put in
a log line or an error message.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from bisector.vocab.errors import InputError

SINGLE_TOKEN_NAME = "default"
ADMINS_KEY = "admins"
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")


@dataclass(frozen=True)
class Person:
    name: str
    admin: bool

    def may_act_on(self, owner: str | None) -> bool:
        """Whether this person may change a job that owner submitted (None: a job stored before owners)."""
        return self.admin or owner == self.name


class TokenBook:
    def __init__(self, tokens: dict[str, str], admins: frozenset[str] = frozenset()) -> None:
        """tokens: name -> token (each checked by the callers: non-empty, distinct)."""
        self._digests = [(name, _digest(token)) for name, token in tokens.items()]
        self._admins = admins

    @classmethod
    def single(cls, token: str) -> TokenBook:
        return cls({SINGLE_TOKEN_NAME: token}, frozenset({SINGLE_TOKEN_NAME}))

    def who(self, given: str) -> Person | None:
        """The person whose token was given, else None. Compares with every token: the time taken does not say
        which one matched, or how far a wrong one got."""
        digest = _digest(given)
        matches = [name for name, expected in self._digests if hmac.compare_digest(digest, expected)]
        return Person(matches[0], matches[0] in self._admins) if matches else None


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def read_tokens_file(path: str) -> TokenBook:
    """The book of a tokens file; InputError (one line, naming no token) for a file that cannot serve."""
    where = f"--tokens-file {path}"
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise InputError(f"{where}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"{where}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{where}: not TOML: {exc}") from None
    admins = data.pop(ADMINS_KEY, [])
    if not isinstance(admins, list) or not all(isinstance(name, str) for name in admins):
        raise InputError(f"{where}: {ADMINS_KEY} must be a list of names")
    tokens: dict[str, str] = {}
    seen: dict[str, str] = {}  # token -> the name it was given first
    for name, token in data.items():
        if not NAME_PATTERN.fullmatch(name):
            raise InputError(f"{where}: name {name!r}: letters, digits, '.', '_', '@' or '-', at most 64")
        if not isinstance(token, str):
            raise InputError(f'{where}: {name}: the token must be a string (name = "token")')
        if not token.strip():
            raise InputError(f"{where}: {name}: the token is empty")
        if token != token.strip() or any(c.isspace() or not c.isprintable() for c in token):
            raise InputError(f"{where}: {name}: the token holds spaces or control characters")
        if token in seen:
            raise InputError(f"{where}: {name} and {seen[token]} have the same token")
        seen[token] = name
        tokens[name] = token
    if not tokens:
        raise InputError(f'{where}: no tokens (one `name = "token"` line per person)')
    unknown = sorted(set(admins) - set(tokens))
    if unknown:
        raise InputError(f"{where}: {ADMINS_KEY} names {', '.join(unknown)}, who have no token")
    return TokenBook(tokens, frozenset(admins))


def tokens_from_options(token_file: str | None, tokens_file: str | None) -> TokenBook | None:
    """The tokens a server accepts: --tokens-file's people, else the single token of --token-file or
    $BISECT_TOKEN (ignored beside --tokens-file: it may be there for the client); None when there is none."""
    from bisector.service.client import read_token

    if tokens_file is not None:
        if token_file is not None:
            raise InputError("--token-file and --tokens-file: give one of them")
        return read_tokens_file(tokens_file)
    token = read_token(token_file)
    return TokenBook.single(token) if token is not None else None
