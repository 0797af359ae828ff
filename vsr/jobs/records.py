"""The job records a Celery broker's Redis keeps for ``vsr jobs --broker`` (:mod:`vsr.jobs.distributed`): their
keys, the one-owner-per-output rule as atomic Redis scripts, broker URLs with their secrets masked, and the Redis
clients: :func:`connect` (a command's: a broker that is not there is one line in seconds) and :func:`records` (a
worker's: its writes wait for a Redis that is restarting rather than lose their chunk).

``vsr:output:<output path>`` names the job that owns an output.  Taking it (a submit, a retry) is one Lua script
that reads the holder's state and sets the owner (and for a retry the job's new state) at once, so two submits
or retries racing for one output cannot both win; a finished holder (done, failed, cancelled) no longer owns it.
"""

from __future__ import annotations

import os
import posixpath
import re
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from vsr.errors import BrokerError

CONNECT_TIMEOUT_S = 3.0  # a broker that is not there is reported in seconds, not retried forever
# a worker's record writes wait this long (about 2 minutes: 0.25 s doubling to 5 s) for a Redis that went away
# (restarted, failed over) before its chunk is handed back
RECORDS_RETRIES, RECORDS_BACKOFF = 30, ExponentialBackoff(cap=5, base=0.25)
_RECORDS: dict[str, redis.Redis] = {}

UNFINISHED = ("queued", "running", "waiting")
# Query parameters of a broker URL that carry a secret (redis-py reads ?password=...).
SECRET_PARAMS = re.compile(r"pass(word)?|pwd|secret|token|auth|key", re.I)

# KEYS: the owner key, the job's record.  ARGV: the job id, the record key prefix, the states the job may be
# in (";"-joined, "" = any), the state to set ("" = none).  Returns nil, or [holder, its state], or ["", state]
# when the job itself is in a state not allowed.
_TAKE = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  local state = redis.call('HGET', ARGV[2] .. holder, 'state')
  if state == 'queued' or state == 'running' or state == 'waiting' then
    return {holder, state}
  end
end
if ARGV[3] ~= '' then
  local mine = redis.call('HGET', KEYS[2], 'state') or ''
  if not string.find(';' .. ARGV[3] .. ';', ';' .. mine .. ';', 1, true) then
    return {'', mine}
  end
end
redis.call('SET', KEYS[1], ARGV[1])
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[2], 'state', ARGV[4], 'error', '')
end
return false
"""
# KEYS: the owner key.  ARGV: the job id.  Deletes the key only while that job holds it.
_GIVE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def key(job_id: str, part: str = "") -> str:
    return f"vsr:job:{job_id}" + (f":{part}" if part else "")


def owner_key(output: str) -> str:
    return f"vsr:output:{output}"


def take_output(db, job_id: str, output: str, allowed: tuple[str, ...] = (), state: str = "") -> None:
    """Make ``job_id`` the owner of ``output``, refused (:class:`BrokerError`) while another unfinished job owns
    it; with ``allowed``, only if the job is in one of those states, and then set its ``state``, atomically."""
    found = db.eval(_TAKE, 2, owner_key(output), key(job_id), job_id, key(""), ";".join(allowed), state)
    if found:
        holder, holder_state = found
        if not holder:
            raise BrokerError(f"job {job_id} is {holder_state or 'gone'}: only a {' or '.join(allowed)} job is "
                              "retried")
        raise BrokerError(f"{output} is already the output of job {holder} ({holder_state}): one unfinished job "
                          "per output (--overwrite does not change that)")


def give_output(db, job_id: str, output: str) -> None:
    """``output`` no longer belongs to ``job_id`` (a submit that did not go through)."""
    db.eval(_GIVE, 1, owner_key(output), job_id)


def safe_url(url: str) -> str:
    """``url`` for messages: a password in it (``redis://user:pass@host``, ``?password=...``) shown as ``***``."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            user = netloc.rpartition("@")[0].partition(":")[0]
            netloc = f"{user}:***@{netloc.rpartition('@')[2]}"
        query = urlencode([(k, "***" if SECRET_PARAMS.fullmatch(k) else v)
                           for k, v in parse_qsl(parts.query, keep_blank_values=True)], safe="*")
        return parts._replace(netloc=netloc, query=query).geturl()
    except ValueError:  # not even a URL (a bad port...): nothing of it is shown that could be a secret
        return "<a broker URL that cannot be parsed>"


# the names of this machine's loopback, one Redis (its default config binds both 127.0.0.1 and ::1); no other
# name is resolved: two names of one remote host are two brokers to vsr
LOOPBACK = ("localhost", "127.0.0.1", "::1")


def broker_key(url: str) -> str:
    """Which Redis database ``url`` names, spelled one way, as redis-py reads it: the scheme and host in lower
    case, the loopback's names as ``localhost``, the port (6379 unless given), the database (``?db=N``, else the
    path, else 0); the user, password and other parameters left out.  ``redis://localhost``,
    ``redis://127.0.0.1:6379/0`` and ``REDIS://LocalHost:6379?db=0`` are one broker.  A URL that cannot be
    parsed is itself, its password masked."""
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        db = dict(parse_qsl(parts.query)).get("db")
        if scheme == "unix":
            where = posixpath.normpath(unquote(parts.path)) if parts.path else ""
        else:
            host = unquote(parts.hostname or "localhost")  # (urlsplit gives it in lower case)
            host = "localhost" if host in LOOPBACK else f"[{host}]" if ":" in host else host
            where = f"{host}:{parts.port or 6379}"
            db = db if db is not None else unquote(parts.path).replace("/", "") or None
        return f"{scheme}://{where}/{int(db) if db is not None else 0}"
    except ValueError:  # (a bad port or database)
        return safe_url(url)


def scrub(text: str, url: str) -> str:
    """``text`` (an error message from redis-py, Celery, kombu) without the secrets of ``url``."""
    for secret in secrets(url):
        text = text.replace(secret, "***")
    return text


def secrets(url: str) -> list[str]:
    """The passwords and secret parameters in ``url``, as written and decoded (longest first)."""
    found = set()
    try:
        parts = urlsplit(url)
        if parts.password:
            found.add(parts.password)
        found.update(v for k, v in parse_qsl(parts.query, keep_blank_values=True) if SECRET_PARAMS.fullmatch(k))
    except ValueError:
        match = re.search(r"//[^/@]*:([^/@]+)@", url)
        if match:
            found.add(match.group(1))
    found |= {unquote(s) for s in found}
    return sorted((s for s in found if s), key=len, reverse=True)


def records(url: str) -> redis.Redis:
    """This process's Redis client for the job records (redis-py reconnects in a forked child by itself)."""
    if url not in _RECORDS:
        _RECORDS[url] = redis.Redis.from_url(url, decode_responses=True, socket_connect_timeout=CONNECT_TIMEOUT_S,
                                             retry=Retry(RECORDS_BACKOFF, RECORDS_RETRIES),
                                             retry_on_error=[redis.ConnectionError, redis.TimeoutError])
    return _RECORDS[url]


def connect(broker: str) -> redis.Redis:
    """A client of ``broker`` that answered a PING; a bad URL or a broker not running is one-line BrokerError
    (its password masked, whatever form it was given in)."""
    celery = os.environ.get("CELERY_BROKER_URL")
    # Celery prefers it to the broker it is given: chunks and records would part (one Redis database spelled
    # two ways is one broker)
    if celery and broker_key(celery) != broker_key(broker):
        raise BrokerError(f"CELERY_BROKER_URL names another broker ({safe_url(celery)}) than {safe_url(broker)}: "
                          "Celery would send vsr's chunks there and vsr its records here; unset it (vsr reads "
                          "--broker or VSR_BROKER)")
    scheme = urlsplit(broker).scheme
    if scheme not in ("redis", "rediss", "unix"):
        raise BrokerError(f"the broker must be a Redis URL (redis://HOST:PORT/N), not {safe_url(broker)!r}")
    if scheme != "unix" and "db" in dict(parse_qsl(urlsplit(broker).query)):
        raise BrokerError(f"give the broker's database in its path (redis://HOST:PORT/N), not as ?db= "
                          f"({safe_url(broker)}): Celery's transport reads the path alone, so vsr's chunks and "
                          "its records would be in two databases")
    try:
        db = redis.Redis.from_url(broker, decode_responses=True, socket_connect_timeout=CONNECT_TIMEOUT_S,
                                  socket_timeout=30)
        db.ping()
    except ValueError as err:
        raise BrokerError(f"bad broker URL {safe_url(broker)!r}: {scrub(str(err), broker)}") from None
    except (redis.RedisError, OSError) as err:
        raise BrokerError(f"cannot reach the broker {safe_url(broker)} (is Redis running there?): "
                          f"{scrub(str(err), broker)}") from None
    return db


def persistence(db: redis.Redis, broker: str) -> str | None:
    """What a restart of ``broker``'s Redis would forget, in one line; None where it keeps an append-only file.
    A Redis whose CONFIG is disabled (managed services rename it) or denied by its ACL is said to be unknown."""
    try:
        aof = db.config_get("appendonly").get("appendonly")
        save = db.config_get("save").get("save")
    except redis.ResponseError as err:
        return (f"the broker {safe_url(broker)} does not say whether it keeps its data on disk (CONFIG GET: "
                f"{scrub(str(err), broker)}): unless it runs with appendonly yes, a restart forgets its jobs")
    if aof == "yes":
        return None
    if save:
        return (f"the broker {safe_url(broker)} keeps only snapshots (save {save}), no append-only file: a restart "
                "forgets the jobs queued or changed since the last one (run Redis with appendonly yes)")
    return (f"the broker {safe_url(broker)} keeps nothing on disk (appendonly no, no save): a restart forgets "
            "every job (run Redis with appendonly yes)")
