"""Shared fixtures. Integration tests get a REAL embedded Argilla (server + SQL search plug-in
+ Redis + rq worker), started once per session in its own state folder on free ports, and
stopped at the end - also when tests fail."""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# pytest-xdist's workers start with COLUMNS/LINES of a 80x24 terminal in their environment; rich
# fixes a console's width from COLUMNS when the console is made (crowdpref.cli's, at import), so
# the CLI tests' own COLUMNS (CliRunner's env) would be ignored and tables wrap differently.
for _size in ("COLUMNS", "LINES"):
    os.environ.pop(_size, None)

from crowdpref.settings import Settings, load_settings  # noqa: E402
from tests.ports import free_port  # noqa: E402,F401 - the tests import it from here too

# Every Argilla the tests start (session fixtures, test stacks, `crowdpref up` in a subprocess)
# hashes passwords at bcrypt cost 4 instead of argilla-server's 12 (~0.28 s a hash): a test-only
# knob of services/argilla/launch.py (TEST_BCRYPT_ROUNDS); unset, as outside the tests, Argilla
# hashes at its own cost (tests/integration/test_argilla_bcrypt.py checks both).
TEST_BCRYPT_ROUNDS = "CROWDPREF_TEST_BCRYPT_ROUNDS"
os.environ[TEST_BCRYPT_ROUNDS] = "4"
# The test Prefect servers (the embedded ones inherit this environment) look for deployment
# schedules to fill every 5 s instead of Prefect's 60 (test_deployments waits for the scheduler
# to create runs).
os.environ["PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS"] = "5"
# `crowdpref up` as root runs the public profile's services as their own users (services/privileges.py),
# which needs every folder from / to the checkout, its interpreter and the state folder open to
# others: the tests' state folders live in pytest's private (0700) temp folder, and the checkout may
# be a clone in a 0700 folder (an interpreter under /root). So the test stacks run their services as
# the test's user; tests/integration/test_service_users.py runs them as their own users.
os.environ.setdefault("CROWDPREF_SERVICE_USERS", "off")
# Prefect makes an API client for every task run, and each loads a CA bundle for TLS (certifi's:
# ~25-37 ms of CPU), although the tests' Prefect API is plain HTTP on 127.0.0.1: a bundle of one
# certificate (a self-signed one whose key was thrown away) costs ~0.5 ms. Tests only (set before
# Prefect is imported); the CLI's subprocesses (cli_environment) and production keep the default.
os.environ["PREFECT_API_SSL_CERT_FILE"] = str(Path(__file__).with_name("prefect-api-ca.pem"))

if TYPE_CHECKING:
    from tests.postgres_server import PostgresServer

REPO = Path(__file__).resolve().parents[1]
TEST_OUTPUT = REPO / "test-output"


def isolated_settings(home: Path, **overrides: object) -> Settings:
    """Settings for a private embedded stack: own state folder, free ports, no external URLs
    (so a developer's own CROWDPREF_*/ARGILLA_* environment cannot leak in)."""
    values: dict[str, object] = dict(
        home=home,
        argilla_port=free_port(),
        prefect_port=free_port(),
        redis_port=free_port(),
        portal_port=free_port(),
        site_port=free_port(),
        fake_prolific_port=free_port(),
        argilla_venv=REPO / ".venv-argilla",
        argilla_url=None,
        argilla_api_key=None,
        prefect_api_url=None,
    )
    values.update(overrides)
    return load_settings(**values)


def cli_environment(home: Path) -> dict[str, str]:
    """Environment for running the real ``crowdpref`` command in a subprocess: this process's
    environment without any crowdpref, Argilla, Prefect or service credential setting, a
    private state folder ``home`` and free ports, so no service of another stack is reached."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CROWDPREF_", "ARGILLA_", "PREFECT_", "HF_", "OPENAI_", "PROLIFIC_"))}
    env.update(
        CROWDPREF_HOME=str(home),
        CROWDPREF_ARGILLA_PORT=str(free_port()),
        CROWDPREF_PREFECT_PORT=str(free_port()),
        CROWDPREF_REDIS_PORT=str(free_port()),
        CROWDPREF_PORTAL_PORT=str(free_port()),
        CROWDPREF_SITE_PORT=str(free_port()),
        CROWDPREF_FAKE_PROLIFIC_PORT=str(free_port()),
        CROWDPREF_ARGILLA_VENV=str(REPO / ".venv-argilla"),
        COLUMNS="200",
    )
    env[TEST_BCRYPT_ROUNDS] = os.environ[TEST_BCRYPT_ROUNDS]  # test stacks hash cheaply (see above)
    env["CROWDPREF_SERVICE_USERS"] = os.environ["CROWDPREF_SERVICE_USERS"]  # the test's user (see above)
    return env


@dataclass
class ArgillaServer:
    settings: Settings
    api_url: str
    owner_api_key: str


@pytest.fixture(scope="session")
def output_dir() -> Path:
    """Where tests keep what a person may want to look at afterwards (screenshots...)."""
    TEST_OUTPUT.mkdir(exist_ok=True)
    return TEST_OUTPUT


def _stale_state_folders() -> list[Path]:
    """State folders of earlier test sessions whose pytest is gone (an interrupted run), never
    those of a session still running beside us."""
    stale = []
    for folder in TEST_OUTPUT.glob("state-*"):
        owner = folder.name.removeprefix("state-")
        if owner.isdigit() and Path(f"/proc/{owner}").exists():
            continue
        stale.append(folder)
    return stale


def _stop_stale_postgres() -> None:
    """Stop the throwaway PostgreSQL servers (``state-*/postgres/data/postmaster.pid``) that
    interrupted sessions left running; their folders stay (logs) until the stacks' clean-up."""
    from tests import postgres_server

    for folder in _stale_state_folders():
        if (folder / "postgres" / "data" / "postmaster.pid").exists():
            postgres_server.stop_folder(folder / "postgres")


def _remove_orphaned_postgres_folders() -> None:
    """The public profile's PostgreSQL folders in /var/lib/crowdpref (a state folder the server's
    account cannot reach, as root) that tests left: their state folder, in the temp dir or
    test-output, is gone and their server stopped."""
    from tests.postgres_server import orphaned_system_folders

    for folder in orphaned_system_folders([Path(tempfile.gettempdir()), TEST_OUTPUT]):
        shutil.rmtree(folder, ignore_errors=True)


def _stop_stale_test_stacks(settings_for: object) -> None:
    """Stop and remove the state folders of earlier test sessions whose pytest is gone
    (an interrupted run), never those of a session still running beside us."""
    from services import stack

    _stop_stale_postgres()  # before its data folder goes
    for folder in _stale_state_folders():
        stack.down(settings_for(folder))
        shutil.rmtree(folder, ignore_errors=True)
    _remove_orphaned_postgres_folders()


def _session_home() -> Path:
    """This session's state folder: ``test-output/state-<pid>`` (or CROWDPREF_TEST_HOME)."""
    return Path(os.environ.get("CROWDPREF_TEST_HOME", TEST_OUTPUT / f"state-{os.getpid()}"))


@pytest.fixture(scope="session")
def embedded_settings() -> Iterator[Settings]:
    """One private embedded stack per test session (its own state folder
    ``test-output/state-<pid>``, free ports), so two sessions side by side never touch each
    other's services. Components start on demand (``argilla_server``, ``prefect_server``) and all
    stop at the end, also when tests fail; the folder (logs) stays until the next session."""
    from services import stack

    _stop_stale_test_stacks(isolated_settings)
    settings = isolated_settings(_session_home())
    try:
        yield settings
    finally:
        stack.down(settings)


@pytest.fixture(scope="session")
def argilla_server(embedded_settings: Settings) -> ArgillaServer:
    from services import stack

    stack.up(embedded_settings, components=["argilla"])
    return ArgillaServer(
        embedded_settings, embedded_settings.argilla_api_url, embedded_settings.resolved_argilla_api_key()
    )


@pytest.fixture(scope="session")
def prefect_server(embedded_settings: Settings) -> Settings:
    """The embedded Prefect server (API + UI); ``.prefect_url`` / ``.prefect_ui_url``."""
    from services import stack

    stack.up(embedded_settings, components=["prefect"])
    return embedded_settings


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL server per test session (``tests/postgres_server.py``) in
    ``<session state folder>/postgres`` on a free port, stopped at the end, also when tests
    fail. Skips with the reason where none can run (no binaries; root without a postgres user)."""
    from services import postgres
    from tests import postgres_server as throwaway

    reason = postgres.unavailable_reason()
    if reason:
        pytest.skip(f"no PostgreSQL server: {reason}")
    _stop_stale_postgres()
    folder, elsewhere = _session_home() / "postgres", None
    folder.parent.mkdir(parents=True, exist_ok=True)
    if not postgres.server_user_can_enter(folder.parent):
        # a checkout in a private (0700) folder, as root: the server's account cannot reach it,
        # so its folder lives in the temp dir, linked from the session's state folder (where the
        # stale-server clean-up looks)
        elsewhere = Path(tempfile.mkdtemp(prefix="crowdpref-postgres-"))
        folder.unlink(missing_ok=True)
        folder.symlink_to(elsewhere, target_is_directory=True)
    server = throwaway.start(folder, free_port())
    try:
        yield server
    finally:
        server.stop()
        if elsewhere is not None:
            shutil.rmtree(elsewhere, ignore_errors=True)


@dataclass
class PublicArgilla(ArgillaServer):
    """The public profile's Argilla: on the stack's PostgreSQL with several uvicorn workers."""

    root: Path  # the private (0700) folder holding the state folder; removed at the end


@pytest.fixture(scope="session")
def public_argilla() -> Iterator[PublicArgilla]:
    """The public profile's PostgreSQL and Argilla (2 uvicorn workers, on the database
    ``argilla``), started once per session with ``stack.up(components=["argilla"])`` on a fresh
    state folder inside a private ``mkdtemp`` folder (0700: as root, the server's data folder
    then goes to /var/lib/crowdpref/<hash>), free ports, no supervisor; ``stack.down`` at the
    end, also when tests fail, and both folders removed. Skips where PostgreSQL cannot run."""
    from services import postgres, stack

    reason = postgres.unavailable_reason()
    if reason:
        pytest.skip(f"no PostgreSQL server: {reason}")
    root = Path(tempfile.mkdtemp(prefix="crowdpref-public-"))
    settings = isolated_settings(root / "state", public_url="https://study.test", postgres_port=free_port(),
                                 argilla_workers=2)
    try:
        stack.up(settings, components=["argilla"], supervise=False)
        yield PublicArgilla(settings, settings.argilla_api_url, settings.resolved_argilla_api_key(), root)
    finally:
        folder = postgres.data_folder(settings)
        stack.down(settings)
        if folder.parent == postgres.SYSTEM_ROOT:
            shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
        _remove_orphaned_postgres_folders()  # also those of other tests' public stacks


@pytest.fixture()
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty database on the session's PostgreSQL server for this test; yields its
    SQLAlchemy URL (``postgresql+psycopg://crowdpref@127.0.0.1:PORT/test_<hex>``) and drops it
    afterwards (open connections are ended)."""
    name = f"test_{uuid.uuid4().hex[:12]}"
    url = postgres_server.create_database(name)
    try:
        yield url
    finally:
        postgres_server.drop_database(name)


@pytest.fixture()
def unique() -> str:
    """A short unique suffix for names of Argilla objects created by one test."""
    return uuid.uuid4().hex[:8]


@pytest.fixture(scope="session")
def prefect_harness(prefect_server: Settings) -> Iterator[None]:
    """The Prefect API for flow tests that run in this process: the session's embedded Prefect
    server (``prefect_server``), so a test process starts one Prefect server, not two
    (``prefect_test_harness`` started a second on a temporary database: ~10 s of CPU, and its
    background services for the whole session). Flows, task runs and artifacts of different tests
    stay apart by their names and ids, as on a real server."""
    import prefect.context
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: prefect_server.prefect_url}):
        # as prefect_test_harness does: also code in a context copied before this one sees it
        with prefect.context._temporary_global_settings_context(prefect.context.get_settings_context()):
            try:
                yield
            finally:
                _drain_prefect_workers()


def _drain_prefect_workers() -> None:
    """Send the logs and events still queued in this process before the server stops (what
    ``prefect_test_harness`` does on exit)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        try:
            worker.drain_all(timeout=10)
        except Exception:  # noqa: BLE001 - a session's end: nothing to fail any more
            pass


# Connection settings a developer may have in their shell; flow tests must not pick them up.
CONNECTION_ENV = (
    "CROWDPREF_SETTINGS", "CROWDPREF_ARGILLA_URL", "ARGILLA_API_URL", "CROWDPREF_ARGILLA_API_KEY",
    "ARGILLA_API_KEY", "CROWDPREF_OPENAI_BASE_URL", "OPENAI_BASE_URL", "CROWDPREF_OPENAI_API_KEY",
    "OPENAI_API_KEY", "CROWDPREF_OPENAI_MODEL", "OPENAI_MODEL", "CROWDPREF_HF_TOKEN", "HF_TOKEN",
    "CROWDPREF_HF_REPO_ID", "CROWDPREF_HF_ENDPOINT", "HF_ENDPOINT", "HF_HUB_OFFLINE",
    "CROWDPREF_PROLIFIC_TOKEN", "PROLIFIC_TOKEN", "CROWDPREF_DATABASE_URL",
)


@pytest.fixture()
def crowdpref_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefect_harness: None) -> Path:
    """For flow tests under the Prefect harness: a private CROWDPREF_HOME (returned), the
    working folder moved to tmp (no local settings file leaks in), and the developer's
    connection settings cleared."""
    for name in CONNECTION_ENV:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    monkeypatch.setenv("CROWDPREF_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    return home


@pytest.fixture()
def study_env(crowdpref_home: Path, argilla_server: ArgillaServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``crowdpref_home`` pointed at the session's embedded Argilla."""
    monkeypatch.setenv("CROWDPREF_ARGILLA_URL", argilla_server.api_url)
    monkeypatch.setenv("CROWDPREF_ARGILLA_API_KEY", argilla_server.owner_api_key)
    return crowdpref_home


# --- the Prolific contract ------------------------------------------------------------------------------
def check_fake_prolifics() -> None:
    """Raise AssertionError naming every breach of Prolific's published API that a fake Prolific
    (crowdpref/simulation/prolific_server.py, any instance of this process) saw and has not reported yet."""
    module = sys.modules.get("crowdpref.simulation.prolific_server")
    if module is None:  # no fake was ever made
        return
    problems = []
    for fake in list(module.FakeProlific.instances):
        if fake.violations_fatal:
            try:
                fake.check_contract()
            except AssertionError as exc:
                problems.append(str(exc))
    if problems:
        raise AssertionError("\n".join(problems))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> object:
    """A test during which a fake Prolific saw a contract breach (a request of ours or a reply of
    the fake's against crowdpref/simulation/prolific-openapi.yml) fails, whichever fixture made it."""
    result = yield
    check_fake_prolifics()
    return result


# --- pytest-xdist: the files of one costly session stack run on one worker ------------------------------
SHARED_STACK_FIXTURES = ("public_argilla", "prefect_server")
"""Session fixtures that start a whole stack (the public profile's PostgreSQL + Argilla; the embedded
Prefect server with its UI) in each worker that asks for one: the files that use one of them are one
work unit of ``--dist loadfile`` (:func:`pytest_xdist_make_scheduler`), so the stack starts once per run."""
_stack_of_file: dict[str, str | None] = {}


def _stack_group(root: Path, path: str) -> str | None:
    """The first of :data:`SHARED_STACK_FIXTURES` that the test file ``path`` names, if any."""
    if path not in _stack_of_file:
        try:
            text = (root / path).read_text()
        except (OSError, UnicodeDecodeError):
            text = ""
        _stack_of_file[path] = next((name for name in SHARED_STACK_FIXTURES
                                     if re.search(rf"\b{name}\b", text)), None)
    return _stack_of_file[path]


def _run_order(root: Path, item: pytest.Item) -> int:
    """Files that start a shared stack first, then the other integration and browser files (minutes
    each), then the unit tests (seconds): with the slow work units handed out first, the workers
    finish close together instead of one running a long integration file alone at the end."""
    path = item.nodeid.split("::", 1)[0]
    if _stack_group(root, path):
        return 0
    return 1 if path.startswith(("tests/integration/", "tests/browser/")) else 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run order: :func:`_run_order` (a stable sort: a file's tests stay together and in order).
    Every pytest-xdist worker sorts alike, so their collections still match."""
    items.sort(key=lambda item: _run_order(config.rootpath, item))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadfile`` (make test's), except that every file using the same costly stack fixture
    (:data:`SHARED_STACK_FIXTURES`) is in one work unit, so one worker starts that stack, not each;
    the units are handed out in collection order (:func:`pytest_collection_modifyitems`: slow files
    first), not pytest-xdist's largest-test-count first. Other ``--dist`` modes: pytest-xdist's own
    scheduler."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    root = config.rootpath

    class SharedStackScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            group = _stack_group(root, path)
            return f"stack:{group}" if group else path

    config.option.loadscopereorder = False  # hand out work units in run order (_run_order), not by size
    return SharedStackScheduling(config, log)
