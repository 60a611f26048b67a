"""The public profile's PostgreSQL, without a server: where its folder goes, how it is started,
which URLs Argilla and the study store get, and the SCRAM verifiers the server is given.
(tests/integration/test_public_postgres.py runs the real thing.)"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import shutil
from pathlib import Path

import pytest

from crowdpref.errors import ServiceError
from crowdpref.settings import load_settings
from crowdpref.store import StoreError
from crowdpref.store.engine import settings_url
from services import postgres
from services.argilla import service as argilla
from tests.postgres_server import orphaned_system_folders


def _settings(home: Path, **overrides: object):
    values: dict[str, object] = dict(home=home, argilla_url=None, argilla_api_key=None, prefect_api_url=None,
                                     database_url=None)
    values.update(overrides)
    return load_settings(**values)


def public(home: Path, **overrides: object):
    return _settings(home, public_url="https://study.example.org", postgres_port=6999, **overrides)


# --- SCRAM verifiers ----------------------------------------------------------------------------------
def test_scram_verifier_is_rfc7677_for_the_same_salt():
    """RFC 7677's example (user "user", password "pencil"): the client proof and server
    signature of its exchange follow from the verifier's StoredKey and ServerKey."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    verifier = postgres.scram_verifier("pencil", salt=salt)
    head, keys = verifier.split("$", 1)[1].split("$")
    assert head == "4096:W22ZaJ0SNY7soEsUEjb6gQ=="
    stored_key, server_key = (base64.b64decode(part) for part in keys.split(":"))
    auth_message = (b"n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert base64.b64encode(hmac.new(server_key, auth_message, hashlib.sha256).digest()) == \
        b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="  # the RFC's server signature (v=)
    client_signature = hmac.new(stored_key, auth_message, hashlib.sha256).digest()
    proof = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")  # the RFC's client proof (p=)
    client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
    assert hashlib.sha256(client_key).digest() == stored_key


def test_scram_verifier_never_holds_the_password_and_salts_afresh():
    first, second = postgres.scram_verifier("s3cret-pw"), postgres.scram_verifier("s3cret-pw")
    assert first.startswith("SCRAM-SHA-256$4096:") and first != second
    assert "s3cret-pw" not in first


# --- where the server's folder goes ---------------------------------------------------------------------
def test_folder_is_in_the_state_folder_when_the_server_user_can_reach_it(tmp_path, monkeypatch):
    monkeypatch.setattr(postgres, "server_user_can_enter", lambda folder, write=False: True)
    settings = public(tmp_path / "state")
    assert postgres.choose_folder(settings) == settings.state_dir / "postgres"
    assert not postgres.location_record(settings).exists()
    assert postgres.data_folder(settings) == settings.state_dir / "postgres"


def test_folder_moves_to_the_system_root_and_is_recorded_when_the_state_folder_is_closed(tmp_path, monkeypatch):
    monkeypatch.setattr(postgres, "server_user_can_enter", lambda folder, write=False: False)
    monkeypatch.setattr(postgres, "SYSTEM_ROOT", tmp_path / "var-lib-crowdpref")
    settings = public(tmp_path / "state")
    folder = postgres.choose_folder(settings)
    assert folder.parent == tmp_path / "var-lib-crowdpref" and len(folder.name) == 12
    assert folder == postgres.system_folder(settings.state_dir)  # one per state folder
    assert folder.stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "var-lib-crowdpref").stat().st_mode & 0o777 == 0o755
    # status, backups and down find it through the record, whatever the server user can reach later
    monkeypatch.setattr(postgres, "server_user_can_enter", lambda folder, write=False: True)
    assert postgres.data_folder(settings) == folder
    assert postgres.choose_folder(settings) == folder
    other = public(tmp_path / "other-state")
    monkeypatch.setattr(postgres, "server_user_can_enter", lambda folder, write=False: False)
    assert postgres.choose_folder(other) != folder


def test_a_damaged_location_record_is_one_line_naming_it(tmp_path):
    settings = public(tmp_path / "state")
    settings.state_dir.mkdir(parents=True)
    postgres.location_record(settings).write_text("relative/folder\n")
    with pytest.raises(ServiceError) as caught:
        postgres.data_folder(settings)
    message = str(caught.value)
    assert "\n" not in message and str(postgres.location_record(settings)) in message and "absolute" in message


# --- how it runs ----------------------------------------------------------------------------------------
@pytest.mark.skipif(postgres.unavailable_reason() is not None, reason="no PostgreSQL binaries")
def test_service_runs_postgres_in_the_foreground_keeping_data_on_host_and_port_only(tmp_path):
    settings = public(tmp_path / "state", host="127.0.0.1")
    spec = postgres.spec(settings)
    argv = list(spec.argv)
    binary = next(arg for arg in argv if arg.endswith("/postgres"))
    assert argv[argv.index(binary) + 1:argv.index(binary) + 3] == ["-D", str(settings.state_dir / "postgres" / "data")]
    assert "listen_addresses=127.0.0.1" in argv and argv[argv.index("-p") + 1] == "6999"
    assert not any("fsync" in arg or "synchronous_commit" in arg or "full_page_writes" in arg for arg in argv)
    assert spec.port == 6999 and spec.port_setting == "CROWDPREF_POSTGRES_PORT" and spec.name == "postgres"
    if postgres._is_root():
        # setpriv execs the server as postgres: no root parent stays behind (runuser would), no capability
        assert Path(argv[0]).name == "setpriv" and Path(argv[0]).is_absolute() and argv.index("--") < argv.index(binary)
        assert {"--reuid=postgres", "--regid=postgres", "--bounding-set=-all", "--no-new-privs"} <= set(argv)


def test_max_connections_leave_room_for_every_argilla_worker(tmp_path):
    assert postgres.max_connections(public(tmp_path, argilla_workers=8)) >= 8 * 50 + 50


# --- what Argilla and the store are given ---------------------------------------------------------------
def test_argilla_is_on_postgresql_with_its_workers_in_the_public_profile(tmp_path, monkeypatch):
    monkeypatch.setattr(argilla, "server_python", lambda settings: Path("/venv/bin/python"))
    settings = public(tmp_path / "state")
    postgres.password_file(settings, "argilla").parent.mkdir(parents=True)
    postgres.password_file(settings, "argilla").write_text("p@ss/word\n")
    url = argilla.database_url(settings)
    assert url == "postgresql+asyncpg://argilla:p%40ss%2Fword@127.0.0.1:6999/argilla"
    argv = argilla.server_argv(settings)
    assert argv[1:4] == ["-m", "uvicorn", "launch:app"] and argv[argv.index("--workers") + 1] == "2"
    assert "--no-access-log" in argv


def test_laptop_argilla_stays_on_sqlite_with_one_process(tmp_path, monkeypatch):
    monkeypatch.setattr(argilla, "server_python", lambda settings: Path("/venv/bin/python"))
    settings = _settings(tmp_path / "state")
    assert argilla.database_url(settings).startswith("sqlite+aiosqlite:///")
    argv = argilla.server_argv(settings)
    assert argv[2] == "start" and "--workers" not in argv
    # a first start migrates and makes the owner in the server's own process (one import, not two)
    assert argilla.prepares_in_server(settings)
    prepared = argilla.server_argv(settings, prepare=True)
    assert prepared[2:5] == ["start", "--crowdpref-prepare", str(settings.owner_credentials_file)]
    assert prepared[5:] == argv[3:]
    assert not argilla.prepares_in_server(public(tmp_path / "public", argilla_workers=1))  # systemd's steps stay
    assert not argilla.prepares_in_server(_settings(tmp_path / "two", argilla_workers=2))


def test_store_default_moves_to_postgresql_in_the_public_profile(tmp_path):
    laptop = _settings(tmp_path / "laptop")
    assert settings_url(laptop) == f"sqlite:///{laptop.state_dir / 'store.sqlite'}"
    settings = public(tmp_path / "state")
    postgres.password_file(settings, "crowdpref").parent.mkdir(parents=True)
    postgres.password_file(settings, "crowdpref").write_text("a:b@c\n")
    assert settings_url(settings) == "postgresql+psycopg://crowdpref:a%3Ab%40c@127.0.0.1:6999/crowdpref"
    chosen = public(tmp_path / "state", database_url="postgresql+psycopg://me@db.example:5432/mine")
    assert settings_url(chosen) == "postgresql+psycopg://me@db.example:5432/mine"  # database_url wins


def test_store_without_its_password_file_is_one_line_naming_it(tmp_path):
    settings = public(tmp_path / "state")
    with pytest.raises(StoreError) as caught:
        settings_url(settings)
    message = str(caught.value)
    assert "\n" not in message and str(settings.secrets_dir / "postgres-crowdpref") in message
    assert "crowdpref up" in message


def test_only_folders_of_vanished_state_folders_under_the_given_roots_are_orphans(tmp_path, monkeypatch):
    root = tmp_path / "var-lib-crowdpref"
    monkeypatch.setattr(postgres, "SYSTEM_ROOT", root)
    monkeypatch.setattr(postgres, "server_user_can_enter", lambda folder, write=False: False)
    tests_root = tmp_path / "tests"
    gone, kept, elsewhere = (public(tests_root / "gone"), public(tests_root / "kept"),
                             public(tmp_path / "elsewhere" / "state"))
    folders = {name: postgres.choose_folder(s) for name, s in
               (("gone", gone), ("kept", kept), ("elsewhere", elsewhere))}
    running = public(tests_root / "running")
    folders["running"] = postgres.choose_folder(running)
    (folders["running"] / "data").mkdir()
    (folders["running"] / "data" / "postmaster.pid").write_text(f"{os.getpid()}\n")
    (root / "no-backref").mkdir()
    for settings in (gone, elsewhere, running):
        shutil.rmtree(settings.state_dir)
    assert orphaned_system_folders([tests_root]) == [folders["gone"]]
