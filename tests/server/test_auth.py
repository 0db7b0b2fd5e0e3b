"""Authentication and isolation: JWT modes and their failures, namespaces that never see each other, rate limits,
and tokens that never reach a log line or an error body."""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jose import jwk, jwt

from datastore.factory import open_memory
from server.app import create_app
from services.summarising import ExtractiveSummariser
from tests.support.settings import AUTH, make_settings

SECRET = "s3cret-for-tests-only-0123456789abcdef"


def hs_token(sub: str | None = "alice", secret: str = SECRET, **claims: Any) -> str:
    body: dict[str, Any] = {"exp": int(time.time()) + 600, **claims}
    if sub is not None:
        body["sub"] = sub
    return jwt.encode(body, secret, algorithm="HS256")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def app_client(settings, memory) -> AsyncIterator[Any]:
    app = create_app(settings, memory)
    async with app.test_app() as test_app:
        yield test_app.test_client()


@pytest.fixture
async def jwt_client(tmp_path: Path, embedder) -> AsyncIterator[Any]:
    settings = make_settings(tmp_path, auth="jwt", jwt_secret=SECRET, jwt_audience="pyramind", jwt_issuer="idp")
    memory = open_memory(settings, embedder, ExtractiveSummariser())
    async for c in app_client(settings, memory):
        yield c
    memory.close()


def claims_ok(**extra: Any) -> dict[str, Any]:
    return {"aud": "pyramind", "iss": "idp", **extra}


async def remember(client, headers, cid: str, text: str, **body: Any) -> dict:
    r = await client.post(
        "/remember",
        headers=headers,
        json={"conversation_id": cid, "messages": [{"id": f"{cid}-1", "content": text}], "wait": True, **body},
    )
    assert r.status_code == 200, await r.get_json()
    return await r.get_json()


async def test_jwt_namespace_comes_from_the_token(jwt_client) -> None:
    alice, bob = bearer(hs_token("alice", **claims_ok())), bearer(hs_token("bob", **claims_ok()))
    mine = await remember(jwt_client, alice, "c", "Alice keeps her spare key under the blue pot.")
    chunk = mine["chunk_ids"][0]
    r = await jwt_client.post("/query", headers=bob, json={"queries": [{"query": "spare key", "top_k": 10}]})
    assert (await r.get_json())["results"][0]["results"] == []
    assert (await jwt_client.get(f"/memories/{chunk}", headers=bob)).status_code == 404
    assert (await jwt_client.get(f"/memories/{chunk}?namespace=alice", headers=bob)).status_code == 403
    r = await jwt_client.delete("/delete", headers=bob, json={"ids": [chunk]})
    assert r.status_code == 404
    r = await jwt_client.delete("/delete", headers=bob, json={"delete_all": True})
    assert r.status_code == 200
    r = await jwt_client.post("/query", headers=bob, json={"namespace": "alice", "queries": [{"query": "key"}]})
    assert r.status_code == 403 and (await r.get_json())["error"]["field"] == "namespace"
    r = await jwt_client.get(f"/memories/{chunk}", headers=alice)
    assert r.status_code == 200 and "blue pot" in (await r.get_json())["node"]["text"]


@pytest.mark.parametrize(
    ("name", "token", "message"),
    [
        ("expired", lambda: hs_token(**claims_ok(exp=int(time.time()) - 120)), "token expired"),
        ("not yet valid", lambda: hs_token(**claims_ok(nbf=int(time.time()) + 600)), "invalid token"),
        ("wrong audience", lambda: hs_token(aud="other", iss="idp"), "invalid token"),
        ("wrong issuer", lambda: hs_token(aud="pyramind", iss="evil"), "invalid token"),
        ("forged", lambda: hs_token(secret="not-the-secret-000000000000000000", **claims_ok()), "invalid token"),
        ("no exp", lambda: jwt.encode({"sub": "a", **claims_ok()}, SECRET, algorithm="HS256"), "invalid token"),
        ("no sub", lambda: hs_token(None, **claims_ok()), "claim"),
        ("bad sub", lambda: hs_token("a b/c", **claims_ok()), "claim"),
        ("alg none", lambda: _unsigned({"sub": "a", "exp": int(time.time()) + 60, **claims_ok()}), "not allowed"),
        (
            "alg HS512",
            lambda: jwt.encode({"sub": "a", "exp": int(time.time()) + 60, **claims_ok()}, SECRET, algorithm="HS512"),
            "not allowed",
        ),
        ("garbage", lambda: "not.a.jwt", "invalid token"),
        # a configured audience or issuer is required, not only checked when present
        ("no aud", lambda: hs_token(iss="idp"), "invalid token"),
        ("no iss", lambda: hs_token(aud="pyramind"), "invalid token"),
        # numeric claims are finite numbers; every token problem is a 401
        ("exp +inf", lambda: hs_token(**claims_ok(exp=float("inf"))), "invalid token"),
        ("exp -inf", lambda: hs_token(**claims_ok(exp=float("-inf"))), "invalid token"),
        ("nbf -inf", lambda: hs_token(**claims_ok(nbf=float("-inf"))), "invalid token"),
        ("nbf +inf", lambda: hs_token(**claims_ok(nbf=float("inf"))), "invalid token"),
        ("exp a string", lambda: hs_token(**claims_ok(exp=str(int(time.time()) + 600))), "invalid token"),
        ("iat a string", lambda: hs_token(**claims_ok(iat="yesterday")), "invalid token"),
        ("payload nested 10000 deep", lambda: _signed_raw(b'{"a":' * 10_000 + b"1" + b"}" * 10_000), "invalid token"),
        # the namespace claim is matched in full (a trailing newline does not pass)
        ("sub with a trailing newline", lambda: hs_token("alice\n", **claims_ok()), "claim"),
    ],
)
async def test_bad_tokens_are_401_with_a_safe_message(jwt_client, name, token, message) -> None:
    tok = token()
    r = await jwt_client.post("/query", headers=bearer(tok), json={"queries": [{"query": "x"}]})
    body = await r.get_json()
    assert r.status_code == 401, name
    assert r.headers["WWW-Authenticate"] == "Bearer"
    assert message in body["error"]["message"] and tok not in json.dumps(body)


def _signed_raw(payload: bytes, secret: str = SECRET) -> str:
    """An HS256 token over exactly these payload bytes (json.dumps cannot write some hostile payloads)."""
    import base64
    import hashlib
    import hmac

    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    signing_input = f"{b64(json.dumps({'alg': 'HS256', 'typ': 'JWT'}).encode())}.{b64(payload)}"
    signature = hmac.new(secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


def _unsigned(claims: dict[str, Any]) -> str:
    import base64

    def b64(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    return f"{b64({'alg': 'none', 'typ': 'JWT'})}.{b64(claims)}."


async def test_rs256_public_key_and_es256_jwks(tmp_path: Path, embedder) -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem_priv = rsa_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    pem_pub = (
        rsa_key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    (tmp_path / "pub.pem").write_text(pem_pub)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    ec_priv = ec_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    ec_pub = (
        ec_key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    jwk_pub = jwk.construct(ec_pub, "ES256").to_dict()
    jwk_pub["kid"] = "k1"
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [jwk_pub]}))
    exp = int(time.time()) + 300
    cases = [
        (
            "rs-user",
            make_settings(tmp_path / "rs", auth="jwt", jwt_public_key=str(tmp_path / "pub.pem")),
            jwt.encode({"sub": "rs-user", "exp": exp}, pem_priv, algorithm="RS256"),
            _hs_with_public_key(pem_pub, exp),
        ),  # key confusion: HS256 "signed" with the public key must fail
        (
            "es-user",
            make_settings(tmp_path / "es", auth="jwt", jwt_jwks_file=tmp_path / "jwks.json"),
            jwt.encode({"sub": "es-user", "exp": exp}, ec_priv, algorithm="ES256", headers={"kid": "k1"}),
            jwt.encode(
                {"sub": "es-user", "exp": exp},
                rsa_key.private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                ).decode(),
                algorithm="RS256",
                headers={"kid": "k1"},
            ),
        ),
    ]
    for user, settings, good, bad in cases:
        memory = open_memory(settings, embedder, ExtractiveSummariser())
        async for client in app_client(settings, memory):
            r = await client.post("/remember", headers=bearer(good), json={"messages": [{"content": "hello"}]})
            assert r.status_code == 202, await r.get_json()  # stored; indexed in the background
            r = await client.post("/remember", headers=bearer(bad), json={"messages": [{"content": "hello"}]})
            assert r.status_code == 401
        assert memory.storage.counts(user)["messages"] == 1
        memory.close()


def _hs_with_public_key(pem_pub: str, exp: int) -> str:
    import base64
    import hashlib
    import hmac

    def b64(b: bytes) -> str:
        return base64.urlsafe_b64encode(b).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps({"sub": "rs-user", "exp": exp}).encode())
    sig = hmac.new(pem_pub.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(sig)}"


async def test_many_namespaces_never_reach_each_other(client, memory) -> None:
    """Random namespaces and ids: no request in one namespace reads, expands, finds or deletes another's node."""
    rng = random.Random(7)
    spaces = [f"user-{i}" for i in range(8)]
    owned: dict[str, list[str]] = {}
    for ns in spaces:
        word = f"zq{rng.randrange(10**6)}"
        r = await remember(client, AUTH, "shared-cid", f"The secret word of {ns} is {word}.", namespace=ns)
        owned[ns] = r["chunk_ids"] + ["shared-cid-1", "shared-cid"]
    foreign_ids = [(ns, i) for ns, ids in owned.items() for i in ids]
    for ns in spaces:
        r = await client.post(
            "/query",
            headers=AUTH,
            json={
                "namespace": ns,
                "queries": [
                    {"query": "secret word", "top_k": 50},
                    {"query": "secret", "top_k": 50, "filter": {"conversation_id": "shared-cid"}},
                ],
            },
        )
        for res in (await r.get_json())["results"]:
            assert {x["id"] for x in res["results"]} <= set(owned[ns])
            assert all(ns in x["text"] for x in res["results"])
        for other, node_id in rng.sample(foreign_ids, 10):
            if other == ns or node_id in owned[ns]:
                continue
            assert (await client.get(f"/memories/{node_id}?namespace={ns}", headers=AUTH)).status_code == 404
            r = await client.delete("/delete", headers=AUTH, json={"namespace": ns, "ids": [node_id]})
            assert r.status_code == 404
    r = await client.delete("/delete", headers=AUTH, json={"namespace": spaces[0], "delete_all": True})
    assert r.status_code == 200
    for ns in spaces[1:]:
        assert memory.storage.counts(ns)["messages"] == 1
    assert memory.storage.counts(spaces[0])["messages"] == 0


async def test_namespace_in_request_is_validated(client) -> None:
    r = await client.post("/query", headers=AUTH, json={"namespace": "../etc", "queries": [{"query": "x"}]})
    assert r.status_code == 422 and (await r.get_json())["error"]["field"] == "namespace"
    r = await client.get("/memories/x?namespace=a%20b", headers=AUTH)
    assert r.status_code == 422


async def test_rate_limit_answers_429_with_retry_after(tmp_path: Path, embedder) -> None:
    settings = make_settings(tmp_path, rate_limit_per_minute=3)
    memory = open_memory(settings, embedder, ExtractiveSummariser())
    async for client in app_client(settings, memory):
        codes = []
        for _ in range(5):
            r = await client.get("/memories/nope", headers=AUTH)
            codes.append(r.status_code)
        assert codes[:3] == [404] * 3 and codes[3] == 429
        body = await r.get_json()
        assert body["error"]["code"] == "too_many_requests" and int(r.headers["Retry-After"]) >= 1
    memory.close()


async def test_tokens_never_reach_logs_or_error_bodies(client, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    marker = "tok-MARKER-93f1"
    r = await client.post("/query", headers=bearer(marker), json={"queries": [{"query": "x"}]})
    assert r.status_code == 401 and marker not in json.dumps(await r.get_json())
    r = await client.post("/query", headers=AUTH, json={"queries": [{"query": marker, "bogus": marker}]})
    assert r.status_code == 422
    assert marker not in caplog.text and "test-token" not in caplog.text


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"jwt_jwks_file": "JWKS", "jwt_algorithms": "HS256"}, "JWT_ALGORITHMS: HS256 needs JWT_SECRET"),
        ({"jwt_jwks_file": "NOT_JWKS"}, "JWT_JWKS_FILE: .* is not a JWKS"),
        ({"jwt_secret": "s" * 40, "jwt_algorithms": "HS512"}, "JWT_SECRET: 40 bytes; HS512 needs at least 64"),
        ({"jwt_secret": "s" * 40, "jwt_algorithms": '["HS256", "none"]'}, "'none' is never accepted"),
    ],
)
def test_jwt_settings_that_cannot_verify_a_token_are_refused(
    tmp_path: Path, settings: dict[str, str], message: str
) -> None:
    """What tests/local_server/test_cli_serve.py checks through `pyramind serve`, for the other cases."""
    from pydantic import ValidationError

    ec_pub = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [jwk.construct(ec_pub, "ES256").to_dict()]}))
    (tmp_path / "not.json").write_text(json.dumps({"kty": "EC"}))
    paths = {"JWKS": str(tmp_path / "jwks.json"), "NOT_JWKS": str(tmp_path / "not.json")}
    values = {k: paths.get(v, v) for k, v in settings.items()}
    with pytest.raises(ValidationError, match=message):
        make_settings(tmp_path, auth="jwt", **values)
    if "jwt_jwks_file" in values and values["jwt_jwks_file"] == paths["JWKS"]:  # the same key is fine with ES256
        key = make_settings(tmp_path, auth="jwt", jwt_jwks_file=paths["JWKS"]).jwt_verification_key()
        assert isinstance(key, dict) and key["keys"]


def test_a_secret_of_the_hash_size_is_enough(tmp_path: Path) -> None:
    assert make_settings(tmp_path, auth="jwt", jwt_secret="s" * 32).jwt_verification_key() == "s" * 32
    assert make_settings(tmp_path, auth="jwt", jwt_secret="s" * 64, jwt_algorithms="HS512").auth == "jwt"
