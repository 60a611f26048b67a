"""Benchmark: the annotator's pending queue on a 1k vs a 10k record dataset.

Against a RUNNING Argilla server (normally the embedded one using the crowdpref-sql search engine),
it creates one dataset per size (records bulk-upserted 500 per call), lets an annotator submit
responses on a spread of records, and then times what the web UI does to fetch the next record to
annotate: ``POST /api/v1/me/datasets/{id}/records/search`` with the pending filters the UI sends
(response status ``pending`` for this user AND record status ``pending``), ``limit=1``, both for the
head of the queue and for a page deep in it. It prints the median of N repeats per size and the
10k/1k ratio (target: under 2, i.e. the queue does not degrade linearly with the dataset size).
Everything it created (datasets, annotator, workspace) is deleted at the end.

Server and key, first found wins: ``--url``/``--api-key``; ``CROWDPREF_ARGILLA_URL``/
``CROWDPREF_ARGILLA_API_KEY``; the crowdpref settings (embedded server http://127.0.0.1:6900 and the
owner key in ``.crowdpref/secrets/argilla-owner.json``).

    .venv/bin/python benchmarks/argilla_search.py [--sizes 1000 10000] [--repeats 30] [--answered 200]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

BULK_RECORDS = 500  # server max per PUT /records/bulk
BULK_RESPONSES = 100  # server max per POST /me/responses/bulk
CATEGORIES = ["math", "code", "writing", "chat", "safety"]
TARGET_RATIO = 2.0

console = Console()


def resolve_server(url: Optional[str], api_key: Optional[str]) -> Tuple[str, str]:
    url = url or os.environ.get("CROWDPREF_ARGILLA_URL")
    api_key = api_key or os.environ.get("CROWDPREF_ARGILLA_API_KEY")
    if url and api_key:
        return url.rstrip("/"), api_key
    try:  # the project's own resolution (env, settings file, embedded owner credentials)
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from crowdpref.settings import load_settings

        settings = load_settings()
        return (url or settings.argilla_api_url).rstrip("/"), api_key or settings.resolved_argilla_api_key()
    except Exception:
        creds = Path(".crowdpref/secrets/argilla-owner.json")
        if not api_key and not creds.exists():
            raise SystemExit(f"no API key: pass --api-key, set CROWDPREF_ARGILLA_API_KEY or create {creds}")
        return (url or "http://127.0.0.1:6900").rstrip("/"), api_key or json.loads(creds.read_text())["api_key"]


class Api:
    def __init__(self, base_url: str, api_key: str):
        self.http = httpx.Client(base_url=base_url, headers={"X-Argilla-Api-Key": api_key}, timeout=300)

    def __call__(self, method: str, path: str, expect: Tuple[int, ...] = (200, 201), **kwargs) -> dict:
        response = self.http.request(method, path, **kwargs)
        if response.status_code not in expect:
            raise RuntimeError(f"{method} {path}: HTTP {response.status_code}: {response.text[:500]}")
        return response.json() if response.content else {}


def create_dataset(owner: Api, workspace_id: str, name: str) -> str:
    dataset = owner("POST", "/api/v1/datasets", json={
        "name": name,
        "workspace_id": workspace_id,
        "distribution": {"strategy": "overlap", "min_submitted": 2},
    })
    for field in ("prompt", "response_a", "response_b"):
        owner("POST", f"/api/v1/datasets/{dataset['id']}/fields", json={
            "name": field, "title": field, "required": True, "settings": {"type": "text"},
        })
    owner("POST", f"/api/v1/datasets/{dataset['id']}/questions", json={
        "name": "preference", "title": "Which response is better? (1 = A ... 5 = B)", "required": True,
        "settings": {"type": "rating", "options": [{"value": v} for v in range(1, 6)]},
    })
    owner("POST", f"/api/v1/datasets/{dataset['id']}/metadata-properties", json={
        "name": "category", "title": "category", "settings": {"type": "terms", "values": CATEGORIES},
    })
    owner("POST", f"/api/v1/datasets/{dataset['id']}/metadata-properties", json={
        "name": "length", "title": "length", "settings": {"type": "integer"},
    })
    owner("PUT", f"/api/v1/datasets/{dataset['id']}/publish")
    return dataset["id"]


def log_records(owner: Api, dataset_id: str, size: int, progress: Progress) -> None:
    rng = random.Random(size)
    task = progress.add_task(f"logging {size:,} records", total=size)
    for start in range(0, size, BULK_RECORDS):
        items = []
        for i in range(start, min(start + BULK_RECORDS, size)):
            words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "omega"]) for _ in range(40))
            items.append({
                "external_id": f"bench-{i}",
                "fields": {
                    "prompt": f"Prompt {i}: explain {words[:120]}",
                    "response_a": f"Answer A to {i}. {words}",
                    "response_b": f"Answer B to {i}. {words[::-1]}",
                },
                "metadata": {"category": CATEGORIES[i % len(CATEGORIES)], "length": rng.randint(10, 2000)},
            })
        owner("PUT", f"/api/v1/datasets/{dataset_id}/records/bulk", json={"items": items})
        progress.advance(task, len(items))


def record_ids(owner: Api, dataset_id: str, size: int) -> List[str]:
    ids: List[str] = []
    while len(ids) < size:
        page = owner("GET", f"/api/v1/datasets/{dataset_id}/records", params={"offset": len(ids), "limit": 1000})
        if not page["items"]:
            break
        ids += [item["id"] for item in page["items"]]
    return ids


def submit_responses(annotator: Api, ids: List[str], answered: int, progress: Progress) -> None:
    chosen = random.Random(len(ids)).sample(ids, min(answered, len(ids)))
    task = progress.add_task(f"annotator answers {len(chosen)}", total=len(chosen))
    for start in range(0, len(chosen), BULK_RESPONSES):
        batch = chosen[start : start + BULK_RESPONSES]
        annotator("POST", "/api/v1/me/responses/bulk", json={"items": [
            {"record_id": rid, "status": "submitted", "values": {"preference": {"value": 1 + n % 5}}}
            for n, rid in enumerate(batch)
        ]})
        progress.advance(task, len(batch))


QUEUE_FILTERS = {  # what the web UI sends for the "Pending" queue
    "filters": {"and": [
        {"type": "terms", "scope": {"entity": "response", "property": "status"}, "values": ["pending"]},
        {"type": "terms", "scope": {"entity": "record", "property": "status"}, "values": ["pending"]},
    ]},
}


def queue_request(annotator: Api, dataset_id: str, offset: int) -> Tuple[float, int]:
    started = time.perf_counter()
    result = annotator(
        "POST",
        f"/api/v1/me/datasets/{dataset_id}/records/search",
        json=QUEUE_FILTERS,
        params=[("include", "responses"), ("include", "suggestions"), ("offset", offset), ("limit", 1)],
    )
    elapsed = time.perf_counter() - started
    if len(result["items"]) != 1:
        raise RuntimeError(f"expected one queued record at offset {offset}, got {len(result['items'])}")
    return elapsed, result["total"]


def time_queues(annotator: Api, dataset_ids: Dict[int, str], repeats: int) -> Dict[int, Dict[str, float]]:
    """Median latency of the head of the queue and of a page 90% deep, per dataset. The sizes are
    measured in alternation (round-robin), so a load change on the machine hits both alike."""
    deep: Dict[int, int] = {}
    pending: Dict[int, int] = {}
    for size, dataset_id in dataset_ids.items():
        _, pending[size] = queue_request(annotator, dataset_id, 0)
        deep[size] = int(pending[size] * 0.9)
        for _ in range(3):  # warm-up
            queue_request(annotator, dataset_id, 0)
            queue_request(annotator, dataset_id, deep[size])
    head: Dict[int, List[float]] = {size: [] for size in dataset_ids}
    tail: Dict[int, List[float]] = {size: [] for size in dataset_ids}
    for _ in range(repeats):
        for size, dataset_id in dataset_ids.items():
            head[size].append(queue_request(annotator, dataset_id, 0)[0])
            tail[size].append(queue_request(annotator, dataset_id, deep[size])[0])
    return {
        size: {
            "pending": pending[size],
            "deep_offset": deep[size],
            "head_ms": statistics.median(head[size]) * 1000,
            "deep_ms": statistics.median(tail[size]) * 1000,
        }
        for size in dataset_ids
    }


def annotator_api(base_url: str, username: str, password: str) -> Api:
    token = httpx.post(f"{base_url}/api/v1/token", data={"username": username, "password": password}, timeout=60)
    token.raise_for_status()
    me = httpx.get(f"{base_url}/api/v1/me", headers={"Authorization": f"Bearer {token.json()['access_token']}"})
    me.raise_for_status()
    return Api(base_url, me.json()["api_key"])


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="Argilla URL (default: env or the embedded server)")
    parser.add_argument("--api-key", help="owner/admin API key (default: env or the embedded owner key)")
    parser.add_argument("--sizes", type=int, nargs=2, default=[1000, 10000], metavar=("SMALL", "LARGE"))
    parser.add_argument("--repeats", type=int, default=30, help="timed requests per measurement")
    parser.add_argument("--answered", type=int, default=200, help="records the annotator submits per dataset")
    args = parser.parse_args(argv)

    base_url, api_key = resolve_server(args.url, args.api_key)
    owner = Api(base_url, api_key)
    status = owner("GET", "/api/v1/status")
    engine = status.get("search_engine") or {}
    console.print(
        f"server {base_url}: Argilla {status['version']}, search engine {engine.get('distribution', '?')} "
        f"{engine.get('number', '')} {engine.get('database', '')} {engine.get('database_version', '')}".rstrip()
    )

    suffix = uuid.uuid4().hex[:8]
    password = f"bench-{uuid.uuid4().hex}"
    workspace = owner("POST", "/api/v1/workspaces", json={"name": f"bench-search-{suffix}"})
    user_id: Optional[str] = None
    dataset_ids: List[str] = []
    results: Dict[int, Dict[str, float]] = {}
    try:
        user = owner("POST", "/api/v1/users", json={
            "first_name": "bench", "username": f"bench-annotator-{suffix}", "role": "annotator", "password": password,
        })
        user_id = user["id"]
        owner("POST", f"/api/v1/workspaces/{workspace['id']}/users", json={"user_id": user_id})
        annotator = annotator_api(base_url, user["username"], password)

        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as progress:
            for size in args.sizes:
                dataset_id = create_dataset(owner, workspace["id"], f"bench-search-{size}-{suffix}")
                dataset_ids.append(dataset_id)
                log_records(owner, dataset_id, size, progress)
                submit_responses(annotator, record_ids(owner, dataset_id, size), args.answered, progress)

        results = time_queues(annotator, dict(zip(args.sizes, dataset_ids)), args.repeats)

        small, large = args.sizes
        table = Table(title=f"annotator pending queue (limit=1), median of {args.repeats}")
        for column in ("records", "pending", "head of queue", "deep page (offset)"):
            table.add_column(column, justify="right")
        for size in args.sizes:
            r = results[size]
            deep = f"{r['deep_ms']:.1f} ms ({r['deep_offset']:,})"
            table.add_row(f"{size:,}", f"{r['pending']:,}", f"{r['head_ms']:.1f} ms", deep)
        console.print(table)
        ok = True
        for key, label in (("head_ms", "head of queue"), ("deep_ms", "deep page")):
            ratio = results[large][key] / results[small][key]
            ok &= ratio < TARGET_RATIO
            verdict = "[green]OK[/]" if ratio < TARGET_RATIO else "[red]ABOVE TARGET[/]"
            console.print(f"ratio {large:,}/{small:,} ({label}): {ratio:.2f}  (target < {TARGET_RATIO:g}) {verdict}")
        return 0 if ok else 1
    finally:
        for dataset_id in dataset_ids:
            owner.http.delete(f"/api/v1/datasets/{dataset_id}")
        if user_id:
            owner.http.delete(f"/api/v1/users/{user_id}")
        owner.http.delete(f"/api/v1/workspaces/{workspace['id']}")
        console.print("cleaned up: benchmark datasets, annotator and workspace deleted")


if __name__ == "__main__":
    sys.exit(main())
