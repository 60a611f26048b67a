"""A participant changes an answer they already submitted, as Argilla lets an answer's author do
for as long as the account exists (``PUT /api/v1/responses/{id}``: its ``ResponsePolicy`` asks
only who wrote it, not whether the account is still in the workspace). After completion the
public profile's Caddy refuses this from outside (:mod:`crowdpref.portal.answer_guard`); on this
host, or before they finish, it reaches Argilla - the case :mod:`crowdpref.reopen` handles."""

from __future__ import annotations

from typing import Any

import httpx


def change_as_author(api_url: str, owner_api_key: str, record_id: str, username: str, password: str,
                     values: dict[str, Any], status: str = "discarded") -> None:
    """``username`` (signing in with ``password``) sets their answer on the record (server id)
    to ``values`` with ``status``."""
    with httpx.Client(base_url=api_url, timeout=30) as http:
        record = http.get(f"/api/v1/records/{record_id}", headers={"X-Argilla-Api-Key": owner_api_key})
        record.raise_for_status()
        token = http.post("/api/v1/token", data={"username": username, "password": password})
        token.raise_for_status()
        me = http.get("/api/v1/me", headers={"Authorization": f"Bearer {token.json()['access_token']}"}).json()
        [response] = [r for r in record.json()["responses"] if r["user_id"] == me["id"]]
        changed = http.put(f"/api/v1/responses/{response['id']}",
                           headers={"Authorization": f"Bearer {token.json()['access_token']}"},
                           json={"values": {q: {"value": v} for q, v in values.items()}, "status": status})
        changed.raise_for_status()
