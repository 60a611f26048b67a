"""Invitation links (issue 32, item 7): a link's GET - what a mail or chat previewer makes - shows a
page and claims nothing, the person's press of its button (a POST) claims; ``crowdpref invite``
records every link it issues (with an optional label) so that ``crowdpref revoke-invite`` withdraws
one alone; and it warns when the links outnumber the study's places."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from crowdpref.cli import app
from crowdpref.portal.app import create_app
from crowdpref.portal.service import Portal
from crowdpref.settings import load_settings
from crowdpref.store import open_store
from tests.conftest import CONNECTION_ENV
from tests.unit.test_portal_entry import _write, rig  # noqa: F401 - rig: a fixture

PORTAL = "https://portal.example.org"


def test_an_invitation_link_claims_on_its_button_never_on_a_get(rig):
    name = "preview"
    _write(rig.studies, name, participants="invite")
    link = rig.portal.invite_link(name, "study1", "inv-preview").split(rig.settings.portal_public_url, 1)[1]
    previewer = TestClient(create_app(rig.portal), base_url="http://portal.test")
    for _ in range(3):  # a mail client, a chat app, a security scanner: each fetches the link
        page = previewer.get(link, follow_redirects=False)
        assert page.status_code == 200 and "set-cookie" not in page.headers
        assert 'method="post"' in page.text and "Accept the invitation" in page.text
    collection = rig.portal.collection(name, "study1")
    assert rig.store.participants(collection.info.id) == [] and rig.owner.created == []  # nothing claimed
    assert rig.store.events(collection.info.id, kinds=["claimed", "entered"]) == []
    action = re.search(r'action="([^"]+)"', page.text).group(1).replace("&amp;", "&")
    assert action == link  # the button posts the link itself
    person = TestClient(create_app(rig.portal), base_url="http://portal.test")
    pressed = person.post(action, follow_redirects=False)
    assert pressed.status_code == 303 and pressed.headers["location"] == f"/s/{name}/study1/welcome"
    assert len(rig.store.participants(collection.info.id)) == 1
    assert person.get(f"/s/{name}/study1/welcome").status_code == 200
    # a link that is not valid says so on its GET too, and claims nothing
    assert previewer.get(f"/s/{name}/study1?invite=made-up").status_code == 403


@pytest.fixture()
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in CONNECTION_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("CROWDPREF_PORTAL_STUDIES", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CROWDPREF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CROWDPREF_PORTAL_URL", PORTAL)
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "pilot.yaml").write_text(yaml.safe_dump({"name": "pilot", "participants": "invite"}))
    return tmp_path


def _run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})


def _portal() -> tuple[Any, TestClient]:
    settings = load_settings()
    store = open_store(settings)
    return store, TestClient(create_app(Portal(settings, store)), base_url="http://portal.test")


def test_invite_records_each_link_with_its_label_and_one_is_revoked_alone(cli_env: Path) -> None:
    study = str(cli_env / "studies" / "pilot.yaml")
    alice = _run("invite", study, "--label", "alice")
    team = _run("invite", study, "-n", "2", "--label", "team")
    plain = _run("invite", study)
    assert (alice.exit_code, team.exit_code, plain.exit_code) == (0, 0, 0), alice.output + team.output
    [alice_link], [team1, team2], [plain_link] = (r.stdout.split() for r in (alice, team, plain))
    store, browser = _portal()
    try:
        recorded = {i.label: i for i in store.invites("pilot")}
        assert sorted(recorded, key=str) == [None, "alice", "team-1", "team-2"]
        assert {i.key for i in recorded.values()} == {"study1"}
        for label, link in (("alice", alice_link), ("team-1", team1), ("team-2", team2), (None, plain_link)):
            token = Portal(load_settings(), store).invites.loads(link.split("invite=", 1)[1])
            assert token["id"] == recorded[label].id and recorded[label].revoked_at is None  # the link's own id
        assert "alice" not in alice_link  # the label is the operator's note, never in the link
        again = _run("invite", study, "--label", "alice")  # a label names one link
        assert again.exit_code != 0 and "already labels a link" in again.output and again.stdout == ""
        assert len(store.invites("pilot")) == 4

        def opens(link: str) -> int:
            return browser.get(link.split(PORTAL, 1)[1], follow_redirects=False).status_code

        assert [opens(link) for link in (alice_link, team1, team2, plain_link)] == [200] * 4
        revoked = _run("revoke-invite", study, "alice")  # by its label
        assert revoked.exit_code == 0 and "revoked invitation link 'alice'" in revoked.output
        assert [opens(link) for link in (alice_link, team1, team2, plain_link)] == [403, 200, 200, 200]
        withdrawn = browser.post(alice_link.split(PORTAL, 1)[1], follow_redirects=False)
        assert withdrawn.status_code == 403 and "withdrawn" in withdrawn.text  # its button claims nothing either
        assert _run("revoke-invite", study, team2).exit_code == 0  # by the link itself
        assert _run("revoke-invite", study, recorded[None].id).exit_code == 0  # by its id
        assert [opens(link) for link in (alice_link, team1, team2, plain_link)] == [403, 200, 403, 403]
        assert "already revoked" in _run("revoke-invite", study, "alice").output
        unknown = _run("revoke-invite", study, "bob")
        assert unknown.exit_code != 0 and len([x for x in unknown.output.splitlines() if x.strip()]) == 1
    finally:
        store.close()


def test_invite_warns_when_the_links_outnumber_the_places(cli_env: Path) -> None:
    study = str(cli_env / "studies" / "pilot.yaml")
    before_open = _run("invite", study, "-n", "9")  # no collection yet: its places are not known
    assert before_open.exit_code == 0 and before_open.stderr == ""
    store = open_store(load_settings())
    try:
        # 4 questions x R=3, 2 per person: 6 places, 9 links issued for them before, not revoked
        store.collection("pilot", "study1", ["q1", "q2", "q3", "q4"], copies=3, per_participant=2, seed=1,
                         username_prefix="pilot-s1")
    finally:
        store.close()
    more = _run("invite", study, "-n", "2")
    assert more.exit_code == 0 and len(more.stdout.split()) == 2  # the links still come, on stdout
    assert "warning: 11 links for 6 places in pilot study1 (9 issued before)" in more.stderr
    for link in before_open.stdout.split()[:6]:
        assert _run("revoke-invite", study, link).exit_code == 0
    fits = _run("invite", study)  # 5 not revoked + 1: fits the 6 places
    assert fits.exit_code == 0 and fits.stderr == ""
    over = _run("invite", study)
    assert "warning: 7 links for 6 places" in over.stderr
