"""services/backup.py against real databases and restic: the restore drill - a backup taken
mid-study while a private embedded Argilla runs, into a repository outside the state folder,
more work, the stack down, the state folder wiped (a lost disk), a restore from the repository
with the operator's copy of the password file, the stack up again and the study continued to the
end - every item ends with exactly R answers and the restored store and Argilla agree; and the
PostgreSQL branch (pg_dump / pg_restore) for the store and for Argilla's database, on the
session's throwaway PostgreSQL server."""

from __future__ import annotations

import shutil

import httpx
import pandas as pd
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from crowdpref.account_passwords import AccountPasswords
from crowdpref.argilla_client import AnnotatorSession, ArgillaOwner
from crowdpref.store import Claimed, Store, open_store
from crowdpref.study1 import export_responses, study1_collection
from services import backup, stack
from tests.conftest import isolated_settings
from tests.integration.test_study1_collection import Clock, _config, _questions

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not shutil.which("restic"), reason="restic not installed (services/bootstrap.sh)")]


def _answer(api_url: str, username: str, password: str, dataset_name: str, how_many: int | None = None) -> int:
    """``username`` submits ``how_many`` of their pending records (all by default); returns how many."""
    session = AnnotatorSession(api_url, username, password)
    try:
        dataset = next(d for d in session.datasets() if d["name"] == dataset_name)
        pending = session.pending_records(dataset["id"])[:how_many]
        session.submit([(r["id"], {"response": f"{username}'s considered answer to {r['external_id']}.",
                                   "quality": 4}) for r in pending])
        return len(pending)
    finally:
        session.close()


def _argilla_users(api_url: str, api_key: str, prefix: str) -> set[str]:
    users = httpx.get(f"{api_url}/api/v1/users", headers={"X-Argilla-Api-Key": api_key}).json()["items"]
    return {u["username"] for u in users if u["username"].startswith(prefix)}


def _assert_store_and_argilla_agree(collection, store: Store, settings, prefix: str) -> None:
    """Every account the store knows is in Argilla and no other; each participant's submitted
    answers in Argilla are exactly those the store counted; each workspace holds its allocation."""
    cid = collection.info.id
    key = settings.resolved_argilla_api_key()
    assert _argilla_users(settings.argilla_api_url, key, prefix) == {a.username for a in store.accounts(cid)}
    in_argilla: dict[str, set[str]] = {}
    for participant, answer in collection.submitted_answers():
        in_argilla.setdefault(participant.username, set()).add(answer.record_external_id)
    for participant in collection.participants():
        assert in_argilla.get(participant.username, set()) == set(participant.submitted), participant.username
        held = set(collection.owner.record_ids(collection._dataset_of(participant)))
        assert held == set(participant.visible), participant.username


def test_backup_mid_study_more_work_wipe_restore_and_continue(tmp_path, unique):
    settings = isolated_settings(tmp_path / "state", backup_repository=str(tmp_path / "offsite"))
    config = _config(f"bk{unique}")  # 6 questions, R = 2, 3 per participant: 4 people fill it
    prefix = config.study1.username_prefix
    run_dir = settings.runs_dir / config.name
    clock = Clock()

    def open_collection():
        owner = ArgillaOwner(settings.argilla_api_url, settings.resolved_argilla_api_key(),
                             passwords=AccountPasswords.from_secrets(settings.secrets_dir))  # restored with the secrets
        store = open_store(settings, clock=clock)
        return study1_collection(config, _questions(), owner, run_dir, store), store

    try:
        stack.up(settings, components=["argilla"])
        run_dir.mkdir(parents=True)
        _questions().to_parquet(run_dir / "questions.parquet")  # what the questions stage leaves
        collection, store = open_collection()
        cid = collection.info.id
        collection.refill_pool()
        # mid-study: person-1 answered all 3 questions, person-2 one of theirs
        first = collection.claim("person-1", "simulated")
        second = collection.claim("person-2", "simulated")
        assert isinstance(first, Claimed) and isinstance(second, Claimed)
        _answer(settings.argilla_api_url, first.participant.username, collection.owner.passwords(first.participant.username), collection.dataset_name)
        _answer(settings.argilla_api_url, second.participant.username, collection.owner.passwords(second.participant.username), collection.dataset_name, 1)
        assert collection.monitor().submitted == 4
        accounts_at_backup = {a.username for a in store.accounts(cid)}

        result = backup.create(settings)  # online: Argilla runs
        assert result.databases == {"store": "sqlite", "argilla": "sqlite"} and result.initialised
        kept = tmp_path / "password-copy"  # what the operator keeps off the server
        shutil.copy(result.password_file, kept)

        # more work after the backup: person-2 finishes, person-3 arrives and answers, the pool refills
        _answer(settings.argilla_api_url, second.participant.username, collection.owner.passwords(second.participant.username), collection.dataset_name)
        third = collection.claim("person-3", "simulated", refill=False)
        assert isinstance(third, Claimed)
        _answer(settings.argilla_api_url, third.participant.username, collection.owner.passwords(third.participant.username), collection.dataset_name)
        collection.refill_pool()
        assert collection.monitor().submitted == 9
        (run_dir / "after-backup.txt").write_text("written after the backup")
        store.close()

        stack.down(settings)
        shutil.rmtree(settings.state_dir)  # the disk is lost: only the repository and the password copy remain
        settings = settings.model_copy(update={"backup_password_file": kept})
        restored = backup.restore(settings)  # latest: this state folder's
        assert (restored.snapshot, restored.files) == (result.snapshot, result.files)
        stack.up(settings, components=["argilla"])

        # the state of the backup, in the store and in Argilla alike
        collection, store = open_collection()
        assert collection.info.id == cid
        assert not (run_dir / "after-backup.txt").exists()
        assert pd.read_parquet(run_dir / "questions.parquet").equals(_questions())
        assert {a.username for a in store.accounts(cid)} == accounts_at_backup
        assert collection.monitor().submitted == 4
        _assert_store_and_argilla_agree(collection, store, settings, prefix)

        # continue to the end: person-2 comes back to their 2 open questions, then new people
        again = collection.claim("person-2", "simulated")
        assert isinstance(again, Claimed) and not again.new
        assert _answer(settings.argilla_api_url, again.participant.username, collection.owner.passwords(again.participant.username),
                       collection.dataset_name) == 2
        for person in ("person-3", "person-4"):
            claimed = collection.claim(person, "simulated")
            assert isinstance(claimed, Claimed) and claimed.new
            _answer(settings.argilla_api_url, claimed.participant.username, collection.owner.passwords(claimed.participant.username), collection.dataset_name)
        progress = collection.monitor()
        assert progress.complete and progress.submitted == 12
        _assert_store_and_argilla_agree(collection, store, settings, prefix)

        _frame, validation = export_responses(collection, run_dir)
        assert validation["valid"], validation["anomalies"]
        assert validation["items_with_exactly_r_answers"] == 6
        assert validation["workspaces_matching_allocation"] == validation["participants"] == 4
        responses = pd.read_parquet(run_dir / "responses.parquet")
        assert responses.groupby("question_id").size().tolist() == [2] * 6
        assert responses.groupby("question_id")["participant_key"].nunique().tolist() == [2] * 6
        store.close()
    finally:
        stack.down(settings)


# --- PostgreSQL --------------------------------------------------------------------------------------
def _rows(url: str, table: str) -> list[tuple]:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(f"SELECT * FROM {table} ORDER BY 1"))]
    finally:
        engine.dispose()


def _execute(url: str, *statements: str) -> None:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.execute(text(statement))
    finally:
        engine.dispose()


def test_postgresql_store_and_argilla_are_dumped_and_restored(postgres_server, postgres_url, tmp_path, monkeypatch):
    from services.argilla import service as argilla_service

    argilla_db = f"argilla_{tmp_path.name[-8:].lower().replace('-', '_')}"
    argilla_url = postgres_server.create_database(argilla_db)
    try:
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(argilla_service, "database_url", lambda settings: argilla_url, raising=False)
        settings = isolated_settings(tmp_path / "state", database_url=postgres_url)
        assert backup.databases(settings) == {"store": postgres_url, "argilla": argilla_url}
        Store(postgres_url).close()  # the store's schema, its salt
        _execute(postgres_url, "INSERT INTO meta (name, value) VALUES ('mark', 'at-backup')")
        _execute(argilla_url, "CREATE TABLE responses (id int PRIMARY KEY, value text)",
                 "INSERT INTO responses VALUES (1, 'first answer')")
        settings.secrets_dir.mkdir(parents=True)
        (settings.secrets_dir / "argilla-auth-secret").write_text("key")
        store_before, argilla_before = _rows(postgres_url, "meta"), _rows(argilla_url, "responses")

        held = []
        dump = backup._dump

        def watched(part, url, staging):  # the store's writes wait while Argilla is dumped
            if part == "argilla":
                try:
                    _execute(postgres_url, "SET LOCAL lock_timeout = '300ms'",
                             "INSERT INTO meta (name, value) VALUES ('during', 'x')")
                    held.append("written")
                except Exception as exc:  # noqa: BLE001
                    held.append("lock timeout" if "lock timeout" in str(exc) else str(exc)[:200])
            return dump(part, url, staging)

        monkeypatch.setattr(backup, "_dump", watched)
        result = backup.create(settings)
        assert held == ["lock timeout"]
        assert result.databases == {"store": "postgresql", "argilla": "postgresql"}

        # later work, then the restore replaces both databases whole
        _execute(postgres_url, "INSERT INTO meta (name, value) VALUES ('later', 'lost')",
                 "UPDATE meta SET value = 'changed' WHERE name = 'mark'")
        _execute(argilla_url, "INSERT INTO responses VALUES (2, 'after the backup')",
                 "CREATE TABLE added_later (x int)")
        backup.restore(settings)
        assert _rows(postgres_url, "meta") == store_before
        assert _rows(argilla_url, "responses") == argilla_before
        Store(postgres_url).close()  # the restored store opens (its migrations are current)

        # a dump the server refuses half way (an object made since depends on a table it must
        # drop) changes nothing in that database: it loads in one transaction
        _execute(argilla_url, "INSERT INTO responses VALUES (3, 'kept')",
                 "CREATE VIEW newer_view AS SELECT * FROM responses")
        before = _rows(argilla_url, "responses")
        with pytest.raises(backup.BackupError) as err:
            backup.restore(settings, result.snapshot)
        message = str(err.value)
        assert "\n" not in message and "pg_restore" in message and "were not changed" in message, message
        assert "store database was restored already" in message
        assert _rows(argilla_url, "responses") == before
        assert _rows(argilla_url, "newer_view") == before
        # the primary key pg_restore dropped before it failed is back: the drop was rolled back too
        assert _rows(argilla_url, "pg_constraint WHERE conname = 'responses_pkey'") != []
    finally:
        postgres_server.drop_database(argilla_db)

