"""The pre-flight (crowdpref.preflight): each checked thing broken on purpose, and the check says
FAIL with the right fix - Argilla's worker failing jobs, the portal not hearing webhooks, an
expired or wrong-name certificate (served on a local TLS socket), a closed route left open (a
tiny local HTTP server), a wrong Prolific token (the contract-checked fake Prolific), a stale
backup - plus the report's file and exit code, and the gate that keeps a study off the real
Prolific until a pre-flight passed."""

from __future__ import annotations

import datetime as dt
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from crowdpref.preflight import (
    FAIL,
    OK,
    SKIP,
    WARN,
    Report,
    gate,
    host,
    prolific,
    public,
    read_report,
    stack,
    write_report,
)
from crowdpref.preflight.report import Check
from crowdpref.prolific import ProlificClient
from crowdpref.simulation.prolific_server import FakeProlific


# --- Argilla's worker ------------------------------------------------------------------------------------
class FakeRedis:
    """The few reads read_rq_workers makes, over a dict of hashes and sorted-set sizes."""

    def __init__(self, workers: dict[str, dict[str, str]], failed: dict[str, int] | None = None):
        self.workers, self.failed = workers, failed or {}

    def smembers(self, key: str) -> set[bytes]:
        assert key == "rq:workers"
        return {k.encode() for k in self.workers}

    def hgetall(self, key: str) -> dict[bytes, bytes]:
        return {k.encode(): v.encode() for k, v in self.workers.get(key, {}).items()}

    def scan_iter(self, match: str) -> Iterator[bytes]:
        assert match == "rq:failed:*"
        return iter(k.encode() for k in self.failed)

    def zcard(self, key: str) -> int:
        return self.failed[key]


def test_argilla_worker_failing_jobs_is_a_fail_naming_its_log() -> None:
    broken = FakeRedis({"rq:worker:w1": {"successful_job_count": "1", "failed_job_count": "797"}},
                       {"rq:failed:default": 797, "rq:failed:high": 0})
    check = stack.argilla_worker(stack.read_rq_workers(broken), "/state/logs/argilla-worker.log")
    assert check.status == FAIL and "797 failed job(s), 1 completed" in check.detail
    assert "/state/logs/argilla-worker.log" in check.fix and "crowdpref up" in check.fix
    # the failed-job registry alone (a worker that died and came back) is enough
    registry_only = FakeRedis({"rq:worker:w2": {"successful_job_count": "3", "failed_job_count": "0"}},
                              {"rq:failed:default": 2})
    assert stack.argilla_worker(stack.read_rq_workers(registry_only)).status == FAIL
    healthy = FakeRedis({"rq:worker:w1": {"successful_job_count": "12", "failed_job_count": "0"}})
    assert stack.argilla_worker(stack.read_rq_workers(healthy)).status == OK
    idle = FakeRedis({"rq:worker:w1": {"successful_job_count": "0", "failed_job_count": "0"}})
    assert stack.argilla_worker(stack.read_rq_workers(idle)).status == WARN  # nothing sent to it yet
    assert stack.argilla_worker(stack.read_rq_workers(FakeRedis({}))).status == FAIL  # no worker at all


def test_an_argilla_crowdpref_did_not_start_without_its_signing_key_fails(tmp_path: Path) -> None:
    """``argilla_url`` set: the portal signs participants' Argilla sessions with that Argilla's key,
    which the operator puts in ``<state>/secrets/argilla-auth-secret``; missing, every Start is a
    503, so the pre-flight FAILs right after the services line, naming the file and the fix (never
    the key). The embedded Argilla's key is ``up``'s: OK."""
    from crowdpref.preflight import Probes, run_preflight
    from tests.conftest import isolated_settings

    external = isolated_settings(tmp_path / "home", argilla_url="https://argilla.example.org", argilla_api_key="k")
    key = external.secrets_dir / "argilla-auth-secret"
    probes = Probes(services=list, rq_workers=None, prefect=None, store=None, portal_log=list,  # type: ignore[arg-type]
                    prolific_client=None, hub_whoami=None, backups=None, disk_free=None,  # type: ignore[arg-type]
                    clock_offset=None, http_client=None, tls_context=None)  # type: ignore[arg-type]
    study = Path(__file__).resolve().parents[2] / "studies" / "demo.yaml"
    report = run_preflight(external, study, probes)
    names = [c.name for c in report.checks]
    assert names.index(stack.SIGNING_KEY) == names.index("services healthy") + 1
    check = next(c for c in report.checks if c.name == stack.SIGNING_KEY)
    assert check.status == FAIL and f"{key} is missing" in check.detail and "(503)" in check.detail
    assert check.fix == f"put that server's ARGILLA_AUTH_SECRET_KEY in {key} (one line, `chmod 600`)"
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_text("that-argillas-key")
    there = stack.argilla_signing_key(external)
    assert there.status == OK and str(key) in there.detail and "that-argillas-key" not in there.detail
    assert stack.argilla_signing_key(isolated_settings(tmp_path / "embedded")).status == OK


def test_prefect_worker_offline_or_leaving_runs_late_fails() -> None:
    now = 1_000_000.0
    online = [{"name": "w", "last_heartbeat_time": now - 10}]
    assert stack.prefect_worker(online, 3, 0, "crowdpref", now).status == OK
    assert stack.prefect_worker(online, 0, 0, "crowdpref", now).status == WARN
    late = stack.prefect_worker(online, 3, 2, "crowdpref", now)
    assert late.status == FAIL and "Late" in late.detail
    gone = stack.prefect_worker([{"name": "w", "last_heartbeat_time": now - 600}], 3, 0, "crowdpref", now)
    assert gone.status == FAIL and "600 s ago" in gone.detail and "crowdpref up" in gone.fix


# --- the portal's webhooks -----------------------------------------------------------------------------------
PORTAL_LOG = """2026-11-28 16:46:19,300 crowdpref.portal GET /s/demo/study1 200 40 ms
2026-11-28 16:46:19,368 crowdpref.portal POST /hooks/prolific 401 2 ms
2026-11-28 16:46:22,856 crowdpref.portal POST /hooks/prolific 401 3 ms
""".splitlines()


def test_portal_not_hearing_argilla_webhooks_fails_once_answers_were_given() -> None:
    counts = stack.portal_hook_statuses(PORTAL_LOG)
    heard = sum(n for s, n in counts.get("/hooks/argilla", {}).items() if s < 300)
    deaf = stack.argilla_webhooks_heard(True, heard, 0, answers=24)
    assert deaf.status == FAIL and "24 answer(s)" in deaf.detail and "argilla-worker.log" in deaf.fix
    assert stack.argilla_webhooks_heard(True, 0, 0, answers=0).status == WARN  # nothing answered yet
    assert stack.argilla_webhooks_heard(False, 0, 0, answers=0).status == FAIL  # never registered
    hearing = stack.portal_hook_statuses(PORTAL_LOG + ["2026-11-28 x crowdpref.portal POST /hooks/argilla 200 5 ms"])
    assert stack.argilla_webhooks_heard(True, hearing["/hooks/argilla"][200], 0, answers=24).status == OK


def test_portal_refusing_prolific_webhooks_fails_with_the_renewal_fix() -> None:
    refused = stack.portal_hook_statuses(PORTAL_LOG)["/hooks/prolific"][401]
    check = stack.prolific_webhooks_heard(True, subscribed=True, delivered=0, refused=refused)
    assert check.status == FAIL and "refused 2" in check.detail
    assert "crowdpref prolific-webhooks STUDY.yaml --force" in check.fix
    assert stack.prolific_webhooks_heard(True, subscribed=False, delivered=0, refused=0).status == FAIL
    assert stack.prolific_webhooks_heard(True, subscribed=True, delivered=3, refused=2).status == OK
    assert stack.prolific_webhooks_heard(False, subscribed=False, delivered=0, refused=0).status == OK


# --- the certificate -----------------------------------------------------------------------------------------
def _certificates(tmp_path: Path, name: str, days: tuple[int, int]) -> tuple[Path, Path, Path]:
    """A CA, and a certificate it signed for ``name`` valid from ``days[0]`` to ``days[1]`` days
    from now: (ca.pem, cert.pem, key.pem)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "preflight test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - dt.timedelta(days=400)).not_valid_after(now + dt.timedelta(days=400))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    leaf = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
            .not_valid_before(now + dt.timedelta(days=days[0])).not_valid_after(now + dt.timedelta(days=days[1]))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


class TlsServer:
    """Accepts TLS connections on 127.0.0.1 with one certificate, completes the handshake, closes."""

    def __init__(self, cert: Path, key: Path):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                with self.context.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (OSError, ssl.SSLError):
                pass

    def close(self) -> None:
        self.sock.close()


def _served(tmp_path: Path, cert_name: str, days: tuple[int, int], asked: str = "study.test") -> public.Served:
    ca, cert, key = _certificates(tmp_path, cert_name, days)
    server = TlsServer(cert, key)
    try:
        return public.served_certificate(asked, server.port, "127.0.0.1", ssl.create_default_context(cafile=str(ca)))
    finally:
        server.close()


def test_expired_certificate_fails_with_days(tmp_path: Path) -> None:
    served = _served(tmp_path, "study.test", (-100, -3))
    check = public.certificate("study.test", served)
    assert check.status == FAIL and check.detail.startswith("expired") and "(-3 days)" in check.detail
    assert "Caddy renews it" in check.fix


def test_certificate_for_another_name_fails(tmp_path: Path) -> None:
    served = _served(tmp_path, "other.test", (-1, 60))
    check = public.certificate("study.test", served)
    assert check.status == FAIL and "not valid for study.test" in check.detail
    assert "CROWDPREF_PUBLIC_URL" in check.fix


def test_valid_certificate_says_its_days_left(tmp_path: Path) -> None:
    check = public.certificate("study.test", _served(tmp_path, "study.test", (-1, 60)))
    assert check.status == OK and "(60 days)" in check.detail
    short = public.certificate("study.test", _served(tmp_path, "study.test", (-1, 5)))
    assert short.status == WARN and "days left" in short.detail


# --- routes, redirect, DNS -------------------------------------------------------------------------------------
class Answers(BaseHTTPRequestHandler):
    """200 on ``open_paths``, 403 elsewhere; ``redirect``: 308 to https for every GET."""

    open_paths: tuple[str, ...] = ()
    redirect = False
    scheme = "https"

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        if self.redirect:
            self.send_response(308)
            self.send_header("Location", f"{self.scheme}://{self.headers['Host']}{self.path}")
        else:
            self.send_response(200 if self.path in self.open_paths else 403)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _answer


def _server(**attributes: Any) -> ThreadingHTTPServer:
    handler = type("Handler", (Answers,), attributes)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_closed_route_left_open_fails_naming_it() -> None:
    leaky, tight = _server(open_paths=("/api/v1/token",)), _server()
    probes = public.closed_probes(embedded_argilla=True)
    try:
        with httpx.Client(timeout=5.0) as client:
            check = public.closed_routes(f"http://127.0.0.1:{leaky.server_port}", "study.test", probes, client)
            assert check.status == FAIL
            assert "POST /api/v1/token (Argilla's password sign-in) answered 200" in check.detail
            assert "/api/v1/users" not in check.detail  # only what is open is named
            assert "crowdpref up" in check.fix
            assert public.closed_routes(f"http://127.0.0.1:{tight.server_port}", "study.test", probes,
                                        client).status == OK
    finally:
        leaky.shutdown()
        tight.shutdown()


def test_http_must_redirect_to_https() -> None:
    plain, redirecting, to_http = _server(open_paths=("/",)), _server(redirect=True), _server(redirect=True,
                                                                                              scheme="http")
    try:
        with httpx.Client(timeout=5.0) as client:
            check = public.https_redirect(f"http://127.0.0.1:{plain.server_port}/", "study.test", client)
            assert check.status == FAIL and "answered 200" in check.detail
            assert public.https_redirect(f"http://127.0.0.1:{to_http.server_port}/", "study.test",
                                         client).status == FAIL  # a redirect, but not to HTTPS
            assert public.https_redirect(f"http://127.0.0.1:{redirecting.server_port}/", "study.test",
                                         client).status == OK
    finally:
        for server in (plain, redirecting, to_http):
            server.shutdown()


def test_dns_that_does_not_resolve_or_points_elsewhere() -> None:
    def nowhere(host: str) -> list[str]:
        raise socket.gaierror("Name or service not known")

    missing = public.dns("study.test", {"10.0.0.5"}, nowhere)
    assert missing.status == FAIL and "A (and AAAA) record" in missing.fix
    assert public.dns("study.test", {"10.0.0.5"}, lambda h: ["203.0.113.9"]).status == WARN
    assert public.dns("study.test", {"10.0.0.5"}, lambda h: ["10.0.0.5"]).status == OK


# --- Prolific ---------------------------------------------------------------------------------------------------
def test_wrong_prolific_token_fails_against_the_contract_checked_fake() -> None:
    with FakeProlific(page_size=2) as fake:
        with ProlificClient(fake.base_url, "not-the-token", max_attempts=1, backoff_s=0.0) as wrong:
            check = prolific.token(wrong)
        assert check.status == FAIL and "refused by Prolific (401)" in check.detail
        assert "PROLIFIC_TOKEN" in check.fix and "not-the-token" not in check.detail + check.fix
        with ProlificClient(fake.base_url, fake.token, max_attempts=1, backoff_s=0.0) as right:
            assert prolific.token(right).status == OK


def test_prolific_balance_below_the_cost_fails() -> None:
    class Balance:
        def __init__(self, available: int):
            self.available = available

        def _request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
            assert (method, path) == ("GET", "workspaces/ws-1/balance/")
            return {"currency_code": "GBP", "available_balance": self.available}

    class Cost:
        planned, at_cap = 120.0, 200.0

    low = prolific.balance(Balance(5_000), "ws-1", False, Cost())
    assert low.status == FAIL and "50.00 GBP available" in low.detail and "top up" in low.fix
    assert prolific.balance(Balance(15_000), "ws-1", False, Cost()).status == WARN
    assert prolific.balance(Balance(25_000), "ws-1", False, Cost()).status == OK
    assert prolific.balance(Balance(0), "ws-1", True, Cost()).status == SKIP  # the fake pays nobody


# --- backups, clock, Hub ----------------------------------------------------------------------------------------
def test_stale_backup_fails() -> None:
    now = 1_000_000.0
    stale = host.backups(host.BackupState(now - 3 * 86400, "ab12cd34", readable=True), now)
    assert stale.status == FAIL and "72 h old" in stale.detail and "crowdpref backup" in stale.fix
    unreadable = host.backups(host.BackupState(now - 3600, "ab12cd34", readable=False, problem="bad pack"), now)
    assert unreadable.status == FAIL and "bad pack" in unreadable.detail
    assert host.backups(host.BackupState(None), now).status == FAIL
    assert host.backups(host.BackupState(now - 3600, "ab12cd34", readable=True), now).status == OK


def test_clock_beyond_the_webhook_tolerance_margin_fails() -> None:
    assert host.clock(45.0, "api").status == FAIL
    assert host.clock(-8.0, "api").status == WARN
    assert host.clock(0.4, "api").status == OK
    theirs = dt.datetime(2026, 11, 28, 17, 0, tzinfo=dt.UTC).timestamp()
    assert host.http_date_offset("Sat, 28 Nov 2026 17:00:00 GMT", theirs + 9, theirs + 11) == pytest.approx(10.0)
    assert host.http_date_offset(None, theirs, theirs) is None


def test_hub_read_only_token_or_another_owner_fails() -> None:
    def me(role: str) -> Any:
        return lambda: {"name": "alice", "orgs": [{"name": "lab"}], "auth": {"accessToken": {"role": role}}}

    assert host.hub("lab/data", True, me("read")).status == FAIL
    other = host.hub("bob/data", True, me("write"))
    assert other.status == FAIL and "belongs to bob" in other.detail
    assert host.hub("lab/data", True, me("write")).status == OK
    assert host.hub(None, False, None).status == SKIP


# --- the report, the command ------------------------------------------------------------------------------------
def test_report_round_trips_through_the_run_folder(tmp_path: Path) -> None:
    report = Report("s1", "laptop", 1_700_000_000.0, [Check("a", OK, "fine"), Check("b", FAIL, "broken", "fix b")])
    path = write_report(report, tmp_path)
    assert path == tmp_path / "s1" / "preflight.json" and not list((tmp_path / "s1").glob(".*.tmp"))
    again = read_report(tmp_path, "s1")
    assert again is not None and [c.name for c in again.failed] == ["b"] and again.ran_at == report.ran_at
    assert "| FAIL | b | broken | fix b |" in report.to_markdown()
    (tmp_path / "s1" / "preflight.json").write_text("{", encoding="utf-8")
    with pytest.raises(Exception, match="run `crowdpref preflight STUDY.yaml` again"):
        read_report(tmp_path, "s1")


def test_command_prints_every_line_and_exits_1_on_a_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The laptop profile: the public-address lines are SKIP, said so (not left out); one broken
    thing (the worker's failed jobs) makes the exit code 1 and its fix is printed."""
    from typer.testing import CliRunner

    from crowdpref.cli import app
    from crowdpref.cli import preflight as command
    from crowdpref.preflight import Probes
    from crowdpref.store import Store, default_url
    from tests.conftest import cli_environment

    home = tmp_path / "home"
    home.mkdir()
    store_url = default_url(home)

    def probes(workers: FakeRedis) -> Probes:
        return Probes(services=lambda: [("redis", True), ("portal", True)],
                      rq_workers=lambda: stack.read_rq_workers(workers),
                      prefect=lambda: ([{"last_heartbeat_time": time.time()}], 1, 0),
                      store=lambda: Store(store_url), portal_log=list,
                      prolific_client=lambda config: None, hub_whoami=None,
                      backups=lambda: host.BackupState(time.time() - 60, "ab12cd34", readable=True),
                      disk_free=lambda path: 10**12, clock_offset=lambda: (0.1, "test"),
                      http_client=lambda: None, tls_context=lambda: None)

    study = Path(__file__).resolve().parents[2] / "studies" / "demo.yaml"
    env = cli_environment(home)
    broken = FakeRedis({"rq:worker:w": {"successful_job_count": "1", "failed_job_count": "5"}})
    monkeypatch.setattr(command, "real_probes", lambda settings: probes(broken))
    monkeypatch.setattr(command, "_artifact", lambda settings, report: None)
    result = CliRunner().invoke(app, ["preflight", str(study)], env=env)
    assert result.exit_code == 1, result.output
    assert "FAIL  Argilla worker does its jobs: 5 failed job(s)" in result.output
    assert "argilla-worker.log" in result.output
    assert result.output.count("laptop profile: no public address") == 4
    assert "SKIP  Prolific token valid: the study does not recruit on Prolific (participants: simulated" in result.output
    saved = json.loads((home / "studies" / "demo" / "preflight.json").read_text())
    assert saved["passed"] is False and saved["profile"] == "laptop"

    from crowdpref.portal.argilla_hooks import SECRET_META

    registered = Store(store_url)
    registered.set_meta(SECRET_META, "whsec_test")  # the portal registered its Argilla webhook
    registered.close()
    fine = FakeRedis({"rq:worker:w": {"successful_job_count": "4", "failed_job_count": "0"}})
    monkeypatch.setattr(command, "real_probes", lambda settings: probes(fine))
    result = CliRunner().invoke(app, ["preflight", str(study)], env=env)
    assert result.exit_code == 0, result.output
    assert "GO: no FAIL" in result.output


# --- the gate before publishing on Prolific ---------------------------------------------------------------------
def _passing(study: str, ran_at: float, *checks: Check) -> Report:
    return Report(study, "public", ran_at, list(checks) or [Check("services healthy", OK, "ok")])


def test_gate_refuses_without_a_passed_recent_preflight(tmp_path: Path) -> None:
    events: list[tuple[str, dict[str, Any]]] = []

    def log(kind: str, **detail: Any) -> None:
        events.append((kind, detail))

    now = 1_800_000_000.0
    with pytest.raises(gate.PreflightRefused, match="no pre-flight was run"):
        gate.before_publish(tmp_path, "s", "study1", log, now=now)
    write_report(_passing("s", now - 60, Check("backup recent and readable", FAIL, "old", "back up"),
                          Check("Prolific token valid", FAIL, "refused", "new token")), tmp_path)
    with pytest.raises(gate.PreflightRefused, match="2 FAIL: backup recent and readable, Prolific token valid"):
        gate.before_publish(tmp_path, "s", "study1", log, now=now)
    write_report(_passing("s", now - 2 * 86400), tmp_path)
    with pytest.raises(gate.PreflightRefused, match="48 h old"):
        gate.before_publish(tmp_path, "s", "study1", log, now=now)
    assert events == []  # nothing published, nothing recorded
    write_report(_passing("s", now - 3600), tmp_path)
    assert gate.before_publish(tmp_path, "s", "study1", log, now=now) == "passed"
    assert events == [("preflight_passed", {"preflight_ran_at": now - 3600, "warnings": 0})]
    line = gate.card_line(gate.read_decisions(tmp_path / "s"))
    assert line is not None and "a pre-flight of the server passed" in line and "2027-01-15" in line


def test_skip_records_who_in_the_events_and_the_card_names_nobody(tmp_path: Path) -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    skip = gate.Skip.of("Dr Operator")
    assert gate.before_publish(tmp_path, "s", "study2", lambda k, **d: events.append((k, d)), skip=skip) == "skipped"
    assert events == [("preflight_skipped", {"by": "Dr Operator", "reason": "(none given)"})]
    line = gate.card_line(gate.read_decisions(tmp_path / "s"))
    assert line is not None and "skipped by the operator" in line and "Dr Operator" not in line
    assert gate.Skip.of(None).by.endswith("(OS user)")


def test_publishing_on_prolific_waits_for_the_gate(tmp_path: Path) -> None:
    """Through ensure_prolific_study on the contract-checked fake: refused, the Prolific study
    stays UNPUBLISHED; skipped explicitly, it is published and the skip is in the events."""
    from crowdpref.recruitment import ensure_prolific_study
    from crowdpref.store import Store, default_url
    from tests.conftest import isolated_settings
    from tests.unit.test_recruitment import _config, _study1

    config = _config()
    settings = isolated_settings(tmp_path / "home", portal_url="https://portal.example.org",
                                 prolific_workspace_id="ws-1")
    store = Store(default_url(tmp_path))
    try:
        with FakeProlific(page_size=2) as fake, ProlificClient(fake.base_url, fake.token, backoff_s=0.0) as client:
            collection = _study1(config, store, tmp_path)
            guard = gate.publish_guard(config, settings, collection)
            assert guard is not None
            with pytest.raises(gate.PreflightRefused, match="no pre-flight was run"):
                ensure_prolific_study(collection, config, settings, client, before_publish=guard)
            assert [s["status"] for s in fake.studies.values()] == ["UNPUBLISHED"]
            skipped = gate.publish_guard(config, settings, collection, gate.Skip.of("ops", "rehearsed by hand"))
            platform = ensure_prolific_study(collection, config, settings, client, before_publish=skipped)
            assert platform.state == "active"
            kinds = [(e["kind"], json.loads(e["detail"])) for e in store.events(collection.info.id)
                     if e["kind"].startswith("preflight")]
            assert kinds == [("preflight_skipped", {"by": "ops", "reason": "rehearsed by hand"})]
    finally:
        store.close()


def test_the_fake_prolific_of_a_simulation_is_not_gated() -> None:
    class Target:
        fake = True

    assert gate.required(Target()) is False and gate.required(None) is False


def test_public_profile_lines_run_against_the_address(tmp_path: Path) -> None:
    """The public profile's four lines, wired to a local TLS server (a valid certificate for the
    name) and a local HTTP server that does not redirect: DNS OK, certificate OK with its days,
    redirect FAIL; on a machine with only loopback the closed routes cannot be tried from here,
    and the line says so (WARN), never a silent OK."""
    from crowdpref.preflight import Probes, _public
    from tests.conftest import isolated_settings

    ca, cert, key = _certificates(tmp_path, "study.test", (-1, 90))
    tls, plain = TlsServer(cert, key), _server(open_paths=("/",))
    settings = isolated_settings(tmp_path / "home", public_url="https://study.test", public_tls="internal",
                                 https_port=tls.port, http_port=plain.server_port)
    probes = Probes(services=list, rq_workers=None, prefect=None, store=None, portal_log=list,  # type: ignore[arg-type]
                    prolific_client=None, hub_whoami=None, backups=None, disk_free=None,  # type: ignore[arg-type]
                    clock_offset=None, http_client=lambda: httpx.Client(timeout=5.0),  # type: ignore[arg-type]
                    tls_context=lambda: ssl.create_default_context(cafile=str(ca)),
                    resolver=lambda host: ["127.0.0.1"], local_addresses=lambda: {"127.0.0.1", "::1"})
    try:
        checks = {c.name: c for c in _public(settings, probes)}
    finally:
        tls.close()
        plain.shutdown()
    assert checks["DNS resolves to this host"].status == OK
    assert checks["certificate valid for the name"].status == OK and "(90 days)" in checks[
        "certificate valid for the name"].detail
    assert checks["HTTP redirects to HTTPS"].status == FAIL
    routes = checks["only participant routes answer from outside"]
    assert routes.status == WARN and "cannot be tried from here" in routes.detail


def test_the_card_says_the_preflight_passed_and_when(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A release built after the gate let study 1 through: its card says the pre-flight passed
    and when (a release with no gate decision says nothing of it: the golden cards). The
    privacy review's recognisers (seconds to load) are left out: the card's text is the point."""
    import crowdpref.release.build as release_build
    from tests.unit.test_publish import build, small_config, write_study_run

    monkeypatch.setattr(release_build, "review_privacy", lambda *args, **kwargs: None)

    config = small_config("pub-preflight")
    planted = write_study_run(tmp_path / "pub-preflight", config, source="prolific")
    runs_dir, ran_at = planted.run.path.parent, 1_795_000_000.0
    write_report(_passing(config.name, ran_at), runs_dir)
    gate.before_publish(runs_dir, config.name, "study1", lambda kind, **detail: None, now=ran_at + 60)
    card = (build(planted) / "README.md").read_text(encoding="utf-8")
    assert "Before study 1 was published on Prolific, a pre-flight of the server passed (2026-11-18 " in card


def test_the_study_flow_shows_the_report_as_an_artifact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tasks.preflight as task_module
    from tests.conftest import isolated_settings

    settings = isolated_settings(tmp_path / "home")
    made: list[dict[str, Any]] = []
    monkeypatch.setattr(task_module, "load_settings", lambda: settings)
    monkeypatch.setattr(task_module, "create_markdown_artifact", lambda **kwargs: made.append(kwargs))
    monkeypatch.setattr(task_module, "get_run_context", lambda: "a task run of the study flow")
    assert task_module.show_preflight.fn("s").startswith("no pre-flight report yet")
    write_report(_passing("s", time.time(), Check("clock in time", WARN, "+8.0 s", "NTP")), settings.runs_dir)
    assert task_module.show_preflight.fn("s") == "GO: no FAIL (1 WARN) of 1 checks"
    assert made[0]["key"] == "s-preflight" and "| WARN | clock in time | +8.0 s | NTP |" in made[0]["markdown"]


def test_run_passes_an_explicit_skip_to_the_flows_that_publish(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from crowdpref.cli import app, runs
    from tests.conftest import cli_environment

    called: list[dict[str, Any]] = []
    monkeypatch.setattr(runs, "_use_prefect", lambda settings: None)
    monkeypatch.setattr(runs, "_needs_argilla", lambda *args: False)
    monkeypatch.setattr(runs, "_call_flow", lambda flow, settings, name, **params: (called.append(params) or
                                                                                   ("done", "http://ui/run")))
    study = str(Path(__file__).resolve().parents[2] / "studies" / "demo.yaml")
    env = cli_environment(tmp_path / "home")
    result = CliRunner().invoke(app, ["run", "recruit", study, "--skip-preflight", "--skipped-by", "Ada"], env=env)
    assert result.exit_code == 0, result.output
    assert called == [{"study": study, "skip_preflight": True, "skipped_by": "Ada"}]
    result = CliRunner().invoke(app, ["run", "collect-ratings", study, "--skip-preflight"], env=env)
    assert result.exit_code == 2 and "only the study and recruit flows publish" in result.output
    assert len(called) == 1


def test_the_config_line_reads_the_measured_capacity() -> None:
    """No measurement: WARN with the default; a rehearsal whose slowest wave already missed p95 < 1 s
    (capacity 0): WARN, never an OK that reads "capacity 0"; planned arrivals above it: FAIL."""
    study = Path("studies/demo.yaml")
    load = lambda path: "the config"
    assert host.config_valid(study, load, None)[0].status == WARN
    none_kept = host.config_valid(study, load, {"arrivals_per_s": 0.0, "measured_at": 1_790_000_000},
                                  [("prolific.study1.launch", 0.1)])[0]  # (no rate under the slowest was tried)
    assert none_kept.status == WARN and "below the slowest rate" in none_kept.detail
    assert host.config_valid(study, load, {"arrivals_per_s": 2.0})[0].status == OK
    over = host.config_valid(study, load, {"arrivals_per_s": 2.0}, [("study1 launch", 3.0)])[0]
    assert over.status == FAIL and "3/s" in over.detail


def test_a_paced_launch_faster_than_the_measured_capacity_fails_the_config_line(tmp_path: Path) -> None:
    """The paced launch's rate per study (prolific.studyN.launch) against capacity.json: a step
    set to 30 places per 10 s (3 arrivals/s) on a server measured at 1/s is a FAIL naming it."""
    import yaml

    from crowdpref.config import load_study
    from crowdpref.preflight import _launch_rates

    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "studies" / "demo.yaml").read_text())
    data.setdefault("prolific", {}).setdefault("study1", {})["launch"] = {"step": 30, "step_seconds": 10}
    study = tmp_path / "fast.yaml"
    study.write_text(yaml.safe_dump(data))
    capacity = {"arrivals_per_s": 1.0}
    line = host.config_valid(study, load_study, capacity, lambda config: _launch_rates(config, capacity))[0]
    assert line.status == FAIL and "prolific.study1.launch 3/s" in line.detail
    assert _launch_rates(load_study(study), {"arrivals_per_s": 4.0})[0] == ("prolific.study1.launch", 3.0)
