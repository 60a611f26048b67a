"""The crowdpref-sql search engine, through the real HTTP API of a running argilla-server.

Runs twice: on the ``argilla_server`` fixture (tests/conftest.py: the embedded Argilla on SQLite) and on
``public_argilla`` (the public profile's Argilla on PostgreSQL with 2 uvicorn workers), both started
with ``ARGILLA_SEARCH_ENGINE=crowdpref-sql``, so both SQL dialects of the plug-in are tested.

One small study is built once for the module: a workspace with two annotators (A, B), a dataset with a
text field, a text and a rating question, ``category`` (terms) / ``n`` (integer) metadata, rating
suggestions, a 3-d vector per record and ``TaskDistribution(min_submitted=2)``; 12 records ``r00``..``r11``. Then:

* A submits r00-r03, saves a draft on r04 and discards r05;
* B submits r00, r01 (so both are completed), r06 and r07;
* the owner submits r06 (completed without A ever seeing it).

Assertions go through the endpoints the web UI uses: ``POST /api/v1/me/datasets/{id}/records/search``
(the annotator queue), ``GET /api/v1/me/datasets/{id}/metrics``, ``GET /api/v1/datasets/{id}/progress``
and ``GET /api/v1/metadata-properties/{id}/metrics``.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import argilla as rg
import httpx
import pytest

pytestmark = pytest.mark.integration

N_RECORDS = 12
CATEGORIES = ["cats", "dogs", "birds"]
ALL = [f"r{i:02d}" for i in range(N_RECORDS)]

A_SUBMITTED = {"r00": 5, "r01": 4, "r02": 2, "r03": 3}  # external id -> rating
A_DRAFT = {"r04": 1}
A_DISCARDED = {"r05"}
B_SUBMITTED = {"r00": 1, "r01": 2, "r06": 5, "r07": 4}
OWNER_SUBMITTED = {"r06": 3}
COMPLETED = {"r00", "r01", "r06"}
A_ANSWERED = set(A_SUBMITTED) | set(A_DRAFT) | A_DISCARDED
A_PENDING = set(ALL) - A_ANSWERED


def category(i: int) -> str:
    return CATEGORIES[i % 3]


def n_value(i: int) -> int:
    return (i * 5) % N_RECORDS * 10  # a permutation of 0, 10, ..., 110


def suggested_rating(i: int) -> Optional[int]:
    return None if i % 4 == 3 else (i % 5) + 1  # every 4th record has no suggestion


def text(i: int) -> str:
    return f"Record number {i} is about {category(i)}"


def vector(i: int) -> List[float]:
    return [math.cos(i / 2), math.sin(i / 2), 0.2]


def cosine(u: List[float], v: List[float]) -> float:
    dot = sum(a * b for a, b in zip(u, v))
    return dot / (math.sqrt(sum(a * a for a in u)) * math.sqrt(sum(b * b for b in v)))


class Api:
    """Thin httpx wrapper authenticated with an Argilla API key."""

    def __init__(self, base_url: str, api_key: str):
        self.http = httpx.Client(base_url=base_url, headers={"X-Argilla-Api-Key": api_key}, timeout=60)

    def __call__(self, method: str, path: str, expect: int = 200, **kwargs) -> dict:
        response = self.http.request(method, path, **kwargs)
        assert response.status_code == expect, f"{method} {path}: {response.status_code} {response.text}"
        return response.json() if response.content else {}

    def close(self) -> None:
        self.http.close()


@dataclass
class Study:
    owner: Api
    a: Api
    b: Api
    dataset_id: str
    ids: Dict[str, str]  # external id -> record id
    metadata_ids: Dict[str, str] = field(default_factory=dict)

    def external(self, record_id: str) -> str:
        return {v: k for k, v in self.ids.items()}[record_id]


def _annotator_api(base_url: str, username: str, password: str) -> Api:
    token = httpx.post(f"{base_url}/api/v1/token", data={"username": username, "password": password}, timeout=30)
    assert token.status_code == 201, token.text
    me = httpx.get(
        f"{base_url}/api/v1/me", headers={"Authorization": f"Bearer {token.json()['access_token']}"}, timeout=30
    )
    assert me.status_code == 200, me.text
    return Api(base_url, me.json()["api_key"])


def _respond(api: Api, record_id: str, status: str, rating: Optional[int] = None) -> None:
    body: dict = {"status": status}
    if rating is not None:
        body["values"] = {"rating": {"value": rating}, "comment": {"value": f"rated {rating}"}}
    api("POST", f"/api/v1/records/{record_id}/responses", expect=201, json=body)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def study(request):
    """The study on the embedded Argilla (SQLite) and on the public profile's (PostgreSQL, 2
    uvicorn workers): every test runs against both of the plug-in's SQL dialects."""
    argilla_server = request.getfixturevalue("argilla_server" if request.param == "sqlite" else "public_argilla")
    base_url = argilla_server.api_url.rstrip("/")
    owner = Api(base_url, argilla_server.owner_api_key)
    suffix = uuid.uuid4().hex[:8]
    password = f"pw-{uuid.uuid4().hex}"
    created_users: List[str] = []
    workspace = owner("POST", "/api/v1/workspaces", expect=201, json={"name": f"search-{suffix}"})
    dataset_id = None
    apis: List[Api] = [owner]
    try:
        for who in ("a", "b"):
            user = owner(
                "POST",
                "/api/v1/users",
                expect=201,
                json={
                    "first_name": who,
                    "username": f"search-{who}-{suffix}",
                    "role": "annotator",
                    "password": password,
                },
            )
            created_users.append(user["id"])
            owner("POST", f"/api/v1/workspaces/{workspace['id']}/users", expect=201, json={"user_id": user["id"]})

        client = rg.Argilla(api_url=base_url, api_key=argilla_server.owner_api_key, timeout=120)
        settings = rg.Settings(
            fields=[rg.TextField(name="text")],
            questions=[
                rg.TextQuestion(name="comment", required=False),
                rg.RatingQuestion(name="rating", values=[1, 2, 3, 4, 5]),
            ],
            metadata=[
                rg.TermsMetadataProperty(name="category", options=CATEGORIES),
                rg.IntegerMetadataProperty(name="n", min=0, max=1000),
            ],
            vectors=[rg.VectorField(name="emb", dimensions=3)],
            distribution=rg.TaskDistribution(min_submitted=2),
        )
        dataset = rg.Dataset(name=f"search-{suffix}", workspace=workspace["name"], settings=settings, client=client)
        dataset.create()
        dataset_id = str(dataset.id)
        records = []
        for i in range(N_RECORDS):
            rating = suggested_rating(i)
            suggestions = (
                [rg.Suggestion(question_name="rating", value=rating, score=i / 10, agent=f"model-{i % 2}")]
                if rating
                else []
            )
            records.append(
                rg.Record(
                    id=f"r{i:02d}",
                    fields={"text": text(i)},
                    metadata={"category": category(i), "n": n_value(i)},
                    suggestions=suggestions,
                    vectors={"emb": vector(i)},
                )
            )
        dataset.records.log(records)

        listed = owner("GET", f"/api/v1/datasets/{dataset_id}/records", params={"limit": 100})
        ids = {item["external_id"]: item["id"] for item in listed["items"]}
        assert sorted(ids) == ALL
        metadata = owner("GET", f"/api/v1/me/datasets/{dataset_id}/metadata-properties")
        metadata_ids = {item["name"]: item["id"] for item in metadata["items"]}

        a = _annotator_api(base_url, f"search-a-{suffix}", password)
        b = _annotator_api(base_url, f"search-b-{suffix}", password)
        apis += [a, b]
        for ext, rating in A_SUBMITTED.items():
            _respond(a, ids[ext], "submitted", rating)
        for ext, rating in A_DRAFT.items():
            _respond(a, ids[ext], "draft", rating)
        for ext in A_DISCARDED:
            _respond(a, ids[ext], "discarded")
        for ext, rating in B_SUBMITTED.items():
            _respond(b, ids[ext], "submitted", rating)
        for ext, rating in OWNER_SUBMITTED.items():
            _respond(owner, ids[ext], "submitted", rating)

        yield Study(owner=owner, a=a, b=b, dataset_id=dataset_id, ids=ids, metadata_ids=metadata_ids)
    finally:
        if dataset_id:
            owner.http.delete(f"/api/v1/datasets/{dataset_id}")
        for user_id in created_users:
            owner.http.delete(f"/api/v1/users/{user_id}")
        owner.http.delete(f"/api/v1/workspaces/{workspace['id']}")
        for api in apis:
            api.close()


def status_filter(*statuses: str) -> dict:
    return {"type": "terms", "scope": {"entity": "response", "property": "status"}, "values": list(statuses)}


def search(
    api: Api,
    study: Study,
    *filters: dict,
    sort: Optional[list] = None,
    text_query: Optional[dict] = None,
    offset: int = 0,
    limit: int = 100,
    me: bool = True,
) -> Tuple[List[str], int]:
    """Runs a search like the web UI does and returns (external ids in order, total)."""
    body: dict = {}
    if filters:
        body["filters"] = {"and": list(filters)}
    if sort:
        body["sort"] = sort
    if text_query:
        body["query"] = {"text": text_query}
    path = f"/api/v1/me/datasets/{study.dataset_id}/records/search" if me else (
        f"/api/v1/datasets/{study.dataset_id}/records/search"
    )
    result = api(
        "POST",
        path,
        json=body,
        params={"offset": offset, "limit": limit, "include": "responses,suggestions"},
    )
    return [item["record"]["external_id"] for item in result["items"]], result["total"]


# --- the annotator queue ----------------------------------------------------------------------------


def test_pending_excludes_only_what_this_annotator_answered(study):
    pending, total = search(study.a, study, status_filter("pending"))
    assert set(pending) == A_PENDING
    assert total == len(A_PENDING) == len(pending)
    assert {"r06", "r07"} <= set(pending)  # answered by B (and the owner), not by A

    pending_b, total_b = search(study.b, study, status_filter("pending"))
    assert set(pending_b) == set(ALL) - set(B_SUBMITTED)
    assert total_b == len(pending_b)


def test_ui_queue_with_record_status_hides_completed_records(study):
    record_pending = {"type": "terms", "scope": {"entity": "record", "property": "status"}, "values": ["pending"]}
    queue, total = search(study.a, study, status_filter("pending"), record_pending)
    assert set(queue) == A_PENDING - COMPLETED
    assert "r06" not in queue and "r07" in queue
    assert total == len(queue)

    completed, _ = search(
        study.owner, study, {**record_pending, "values": ["completed"]}, me=False
    )
    assert set(completed) == COMPLETED


@pytest.mark.parametrize(
    "status, expected",
    [
        ("submitted", set(A_SUBMITTED)),
        ("draft", set(A_DRAFT)),
        ("discarded", A_DISCARDED),
    ],
)
def test_status_filters_return_exactly_that_status(study, status, expected):
    found, total = search(study.a, study, status_filter(status))
    assert set(found) == expected
    assert total == len(expected)


def test_status_filters_combine_with_or(study):
    found, total = search(study.a, study, status_filter("pending", "draft"))
    assert set(found) == A_PENDING | set(A_DRAFT)
    assert total == len(found)

    found, total = search(study.a, study, status_filter("submitted", "discarded"))
    assert set(found) == set(A_SUBMITTED) | A_DISCARDED
    assert total == len(found)


def test_without_a_user_pending_means_nobody_answered(study):
    found, total = search(study.owner, study, status_filter("pending"), me=False)
    answered = A_ANSWERED | set(B_SUBMITTED) | set(OWNER_SUBMITTED)
    assert set(found) == set(ALL) - answered
    assert total == len(found)

    found, _ = search(study.owner, study, status_filter("draft"), me=False)
    assert set(found) == set(A_DRAFT)


@pytest.mark.parametrize("filters", [(), (status_filter("pending"),)], ids=["all", "pending"])
def test_paging_covers_everything_exactly_once(study, filters):
    everything, total = search(study.a, study, *filters)
    assert total == len(everything)
    paged: List[str] = []
    for offset in range(0, total + 5, 5):
        page, page_total = search(study.a, study, *filters, offset=offset, limit=5)
        assert page_total == total
        assert page == everything[offset : offset + 5]
        paged += page
    assert paged == everything
    assert len(set(paged)) == len(paged)


def test_per_user_order_is_deterministic_and_differs_between_users(study):
    order_a, _ = search(study.a, study)
    assert search(study.a, study)[0] == order_a
    assert sorted(order_a) == ALL
    order_b, _ = search(study.b, study)
    assert sorted(order_b) == ALL
    assert order_a != order_b
    # The queue keeps its order while it shrinks: pending is A's full order minus what A answered.
    pending, _ = search(study.a, study, status_filter("pending"))
    assert pending == [ext for ext in order_a if ext in A_PENDING]
    # The listing without a user (owner, /datasets/... endpoint) falls back to insertion order.
    assert search(study.owner, study, me=False)[0] == ALL


# --- filters and sorting ----------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_sort_by_integer_metadata(study, order):
    sort = [{"scope": {"entity": "metadata", "metadata_property": "n"}, "order": order}]
    found, total = search(study.a, study, sort=sort)
    expected = sorted(ALL, key=lambda ext: n_value(int(ext[1:])), reverse=order == "desc")
    assert found == expected
    assert total == N_RECORDS


def test_sort_combines_with_the_pending_filter_and_paging(study):
    sort = [{"scope": {"entity": "metadata", "metadata_property": "n"}, "order": "desc"}]
    expected = sorted(A_PENDING, key=lambda ext: -n_value(int(ext[1:])))
    first, total = search(study.a, study, status_filter("pending"), sort=sort, limit=3)
    rest, _ = search(study.a, study, status_filter("pending"), sort=sort, offset=3, limit=100)
    assert first + rest == expected
    assert total == len(expected)


@pytest.mark.parametrize("values", [["cats"], ["cats", "birds"], ["fish"]])
def test_metadata_terms_filter(study, values):
    flt = {"type": "terms", "scope": {"entity": "metadata", "metadata_property": "category"}, "values": values}
    found, total = search(study.a, study, flt)
    expected = {ext for ext in ALL if category(int(ext[1:])) in values}
    assert set(found) == expected
    assert total == len(expected)


def test_metadata_range_filter(study):
    flt = {"type": "range", "scope": {"entity": "metadata", "metadata_property": "n"}, "ge": 20, "le": 60}
    found, _ = search(study.a, study, flt)
    assert set(found) == {ext for ext in ALL if 20 <= n_value(int(ext[1:])) <= 60}


def test_response_value_range_filter_is_scoped_to_the_user(study):
    flt = {"type": "range", "scope": {"entity": "response", "question": "rating"}, "ge": 3}
    found_a, total_a = search(study.a, study, flt)
    expected_a = {ext for ext, r in {**A_SUBMITTED, **A_DRAFT}.items() if r >= 3}
    assert set(found_a) == expected_a  # r00 (5), r01 (4), r03 (3) - not B's ratings
    assert total_a == len(expected_a)

    found_b, _ = search(study.b, study, {**flt, "ge": 1, "le": 2})
    assert set(found_b) == {ext for ext, r in B_SUBMITTED.items() if r <= 2}


def test_response_value_terms_filter(study):
    flt = {"type": "terms", "scope": {"entity": "response", "question": "rating"}, "values": ["2", "5"]}
    found, _ = search(study.a, study, flt)
    assert set(found) == {ext for ext, r in A_SUBMITTED.items() if r in (2, 5)}


def test_sort_by_own_response_value(study):
    sort = [{"scope": {"entity": "response", "question": "rating"}, "order": "desc"}]
    found, _ = search(study.a, study, status_filter("submitted"), sort=sort)
    assert found == sorted(A_SUBMITTED, key=lambda ext: -A_SUBMITTED[ext])


def test_sort_by_record_status_and_own_response_status(study):
    by_record = [{"scope": {"entity": "record", "property": "status"}, "order": "asc"}]
    found, _ = search(study.a, study, sort=by_record)
    assert set(found[: len(COMPLETED)]) == COMPLETED  # "completed" < "pending", as ES keywords sort

    by_response = [{"scope": {"entity": "response", "property": "status"}, "order": "desc"}]
    found, _ = search(study.a, study, sort=by_response)
    n = len(A_SUBMITTED)
    assert set(found[:n]) == set(A_SUBMITTED)
    assert found[n : n + 2] == list(A_DRAFT) + sorted(A_DISCARDED)  # submitted > draft > discarded
    assert set(found[n + 2 :]) == A_PENDING  # no response of A: last


def test_suggestion_filters_and_sort(study):
    def scope(prop: str) -> dict:
        return {"entity": "suggestion", "question": "rating", "property": prop}

    value = {"type": "terms", "scope": scope("value"), "values": ["1"]}
    found, _ = search(study.a, study, value)
    assert set(found) == {ext for ext in ALL if suggested_rating(int(ext[1:])) == 1}

    score = {"type": "range", "scope": scope("score"), "ge": 0.5}
    found, _ = search(study.a, study, score)
    assert set(found) == {ext for ext in ALL if suggested_rating(int(ext[1:])) and int(ext[1:]) / 10 >= 0.5}

    agent = {"type": "terms", "scope": scope("agent"), "values": ["model-1"]}
    found, _ = search(study.a, study, agent)
    assert set(found) == {ext for ext in ALL if suggested_rating(int(ext[1:])) and int(ext[1:]) % 2 == 1}

    sort = [{"scope": scope("score"), "order": "desc"}]
    found, _ = search(study.a, study, sort=sort)
    with_suggestion = [ext for ext in ALL if suggested_rating(int(ext[1:]))]
    assert found[: len(with_suggestion)] == sorted(with_suggestion, reverse=True)  # score = i / 10
    assert set(found[len(with_suggestion) :]) == set(ALL) - set(with_suggestion)  # missing values last


def test_record_filters(study):
    wanted = [study.ids["r03"], study.ids["r09"]]
    ids = {"type": "terms", "scope": {"entity": "record", "property": "id"}, "values": wanted}
    assert set(search(study.a, study, ids)[0]) == {"r03", "r09"}
    external = {"type": "terms", "scope": {"entity": "record", "property": "external_id"}, "values": ["r01", "r11"]}
    assert set(search(study.a, study, external)[0]) == {"r01", "r11"}
    inserted = {
        "type": "range",
        "scope": {"entity": "record", "property": "inserted_at"},
        "ge": "2000-01-01T00:00:00Z",
    }
    assert search(study.a, study, inserted)[1] == N_RECORDS


def test_text_query(study):
    found, total = search(study.a, study, text_query={"q": "NUMBER 7"})
    assert found == ["r07"] and total == 1
    found, _ = search(study.a, study, text_query={"q": "dogs", "field": "text"})
    assert set(found) == {ext for ext in ALL if category(int(ext[1:])) == "dogs"}
    found, _ = search(study.a, study, status_filter("pending"), text_query={"q": "cats"})
    assert set(found) == {ext for ext in A_PENDING if category(int(ext[1:])) == "cats"}
    assert search(study.a, study, text_query={"q": "zebra"}) == ([], 0)
    assert search(study.a, study, text_query={"q": "100%"}) == ([], 0)  # LIKE wildcards are escaped


# --- progress and metrics -------------------------------------------------------------------------------


def test_dataset_progress(study):
    progress = study.owner("GET", f"/api/v1/datasets/{study.dataset_id}/progress")
    assert progress["total"] == N_RECORDS
    assert progress["completed"] == len(COMPLETED)
    assert progress["pending"] == N_RECORDS - len(COMPLETED)


def test_user_progress(study):
    metrics_a = study.a("GET", f"/api/v1/me/datasets/{study.dataset_id}/metrics")["responses"]
    assert metrics_a == {
        "total": N_RECORDS,
        "submitted": len(A_SUBMITTED),
        "draft": len(A_DRAFT),
        "discarded": len(A_DISCARDED),
        "pending": len(A_PENDING),
    }
    metrics_b = study.b("GET", f"/api/v1/me/datasets/{study.dataset_id}/metrics")["responses"]
    assert metrics_b["submitted"] == len(B_SUBMITTED)
    assert metrics_b["draft"] == metrics_b["discarded"] == 0
    assert metrics_b["pending"] == N_RECORDS - len(B_SUBMITTED)


def test_metadata_metrics(study):
    terms = study.a("GET", f"/api/v1/metadata-properties/{study.metadata_ids['category']}/metrics")
    assert terms["type"] == "terms"
    assert terms["total"] == N_RECORDS
    assert {v["term"]: v["count"] for v in terms["values"]} == {c: N_RECORDS // 3 for c in CATEGORIES}

    integer = study.a("GET", f"/api/v1/metadata-properties/{study.metadata_ids['n']}/metrics")
    assert integer["type"] == "integer"
    assert (integer["min"], integer["max"]) == (0, (N_RECORDS - 1) * 10)


# --- vectors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["most_similar", "least_similar"])
def test_similarity_search_ranks_by_cosine(study, order):
    body = {"query": {"vector": {"name": "emb", "record_id": study.ids["r00"], "order": order}}}
    result = study.a(
        "POST", f"/api/v1/me/datasets/{study.dataset_id}/records/search", json=body, params={"limit": 4}
    )
    found = [item["record"]["external_id"] for item in result["items"]]
    others = sorted((ext for ext in ALL if ext != "r00"), key=lambda ext: cosine(vector(0), vector(int(ext[1:]))))
    expected = others[::-1][:4] if order == "most_similar" else others[:4]
    assert found == expected
    scores = [item["query_score"] for item in result["items"]]
    assert scores == sorted(scores, reverse=True)

    body["filters"] = {"and": [status_filter("pending")]}
    result = study.a(
        "POST", f"/api/v1/me/datasets/{study.dataset_id}/records/search", json=body, params={"limit": 100}
    )
    found = [item["record"]["external_id"] for item in result["items"]]
    assert set(found) == A_PENDING - {"r00"}
    assert found == [ext for ext in (others[::-1] if order == "most_similar" else others) if ext in A_PENDING]
