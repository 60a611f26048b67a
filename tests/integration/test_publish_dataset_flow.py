"""The publish-dataset flow on a temporary Prefect server (prefect_test_harness), with a run
folder of fixture files: without a token it leaves the release in the run folder and links to
it; with CROWDPREF_HF_TOKEN / CROWDPREF_HF_REPO_ID / CROWDPREF_HF_ENDPOINT it pushes to a fake
Hub through the real huggingface_hub client. Needs no embedded Argilla services."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from prefect.artifacts import Artifact

from crowdpref.config import load_study
from crowdpref.errors import CrowdprefError
from crowdpref.release import PushError
from flows.publish_dataset import publish_dataset
from tests.fakes.hub_server import GITATTRIBUTES, FakeHubServer
from tests.unit.test_publish import PlantedRun, write_study_run

REPO = Path(__file__).resolve().parents[2]
DEMO_STUDY = REPO / "studies" / "demo.yaml"

@pytest.fixture()
def demo_run(crowdpref_home: Path, monkeypatch: pytest.MonkeyPatch) -> PlantedRun:
    """A private CROWDPREF_HOME holding the demo study's run folder (fixture data)."""
    planted = write_study_run(crowdpref_home / "studies" / "demo", load_study(DEMO_STUDY))
    # credentials in the settings: the flow must forbid them too
    monkeypatch.setenv("CROWDPREF_ARGILLA_API_KEY", planted.api_keys[1])
    monkeypatch.setenv("CROWDPREF_OPENAI_API_KEY", planted.api_keys[2])
    monkeypatch.setenv("CROWDPREF_PROLIFIC_TOKEN", planted.api_keys[3])
    return planted


def _artifact_texts(*keys: str) -> str:
    out = []
    for key in keys:
        artifact = Artifact.get(key)
        assert artifact is not None, key
        out.append(str(artifact.data) + str(artifact.description))
    return "\n".join(out)


def test_without_a_token_the_release_stays_local(demo_run: PlantedRun) -> None:
    result = publish_dataset(study=str(DEMO_STUDY))
    folder = demo_run.run.path.resolve() / "release"
    assert not result.pushed and result.folder.resolve() == folder
    assert str(result.folder) in result.message
    assert (folder / "README.md").exists()
    prefs = pd.read_parquet(folder / "data/default/train-00000-of-00001.parquet")
    assert list(prefs.columns[:4]) == ["prompt", "chosen", "rejected", "margin"]

    link = Artifact.get("demo-release")
    assert link is not None and folder.as_uri() in str(link.data)
    card = Artifact.get("demo-dataset-card")
    assert card is not None and "## Configurations and columns" in str(card.data)
    assert not str(card.data).startswith("---")
    table = Artifact.get("demo-release-configs")
    assert table is not None and "ratings" in str(table.data) and "18" in str(table.data)
    texts = _artifact_texts("demo-release", "demo-dataset-card", "demo-release-configs")
    for secret in demo_run.everything_secret:
        assert secret not in texts


def test_with_settings_it_pushes_to_the_hub(demo_run: PlantedRun,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeHubServer() as hub:
        monkeypatch.setenv("CROWDPREF_HF_TOKEN", hub.write_token)
        monkeypatch.setenv("CROWDPREF_HF_REPO_ID", "crowdpref-tester/demo-rlhf")
        monkeypatch.setenv("CROWDPREF_HF_ENDPOINT", hub.url)
        result = publish_dataset(study=str(DEMO_STUDY))
        assert result.pushed and result.url == f"{hub.url}/datasets/crowdpref-tester/demo-rlhf"
        repo = hub.dataset("crowdpref-tester/demo-rlhf")
        assert repo.private is True  # demo.yaml: publish.private true
        folder = result.folder
        local = {p.relative_to(folder).as_posix(): p.read_bytes()
                 for p in folder.rglob("*") if p.is_file()}
        assert repo.files == {**local, ".gitattributes": GITATTRIBUTES}
        assert "data/ratings/train-00000-of-00001.parquet" in repo.files
        assert b'load_dataset("crowdpref-tester/demo-rlhf"' in repo.files["README.md"]
        link = Artifact.get("demo-release")
        assert link is not None and result.url in str(link.data)
        texts = _artifact_texts("demo-release", "demo-dataset-card", "demo-release-configs")
        assert hub.write_token not in texts
        pushed = b"".join(repo.files.values())
        for secret in [*demo_run.everything_secret, hub.write_token]:
            assert secret.encode() not in pushed


def test_wrong_token_fails_at_once_without_retries(demo_run: PlantedRun,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = "hf_notTheRightToken0123456789"
    with FakeHubServer() as hub:
        monkeypatch.setenv("CROWDPREF_HF_TOKEN", wrong)
        monkeypatch.setenv("CROWDPREF_HF_REPO_ID", "crowdpref-tester/demo-rlhf")
        monkeypatch.setenv("CROWDPREF_HF_ENDPOINT", hub.url)
        with pytest.raises(PushError, match="401") as info:
            publish_dataset(study=str(DEMO_STUDY))
        assert wrong not in str(info.value)
        assert hub.requests.count(("POST", "/api/repos/create")) == 1  # not retried


def test_a_hub_outage_is_retried(demo_run: PlantedRun, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeHubServer() as hub:
        hub.fail_next = [503]
        monkeypatch.setenv("CROWDPREF_HF_TOKEN", hub.write_token)
        monkeypatch.setenv("CROWDPREF_HF_REPO_ID", "crowdpref-tester/demo-rlhf")
        monkeypatch.setenv("CROWDPREF_HF_ENDPOINT", hub.url)
        result = publish_dataset(study=str(DEMO_STUDY))
        assert result.pushed and hub.requests.count(("POST", "/api/repos/create")) == 2
        assert "README.md" in hub.dataset("crowdpref-tester/demo-rlhf").files


def test_push_false_and_missing_preferences(demo_run: PlantedRun,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CROWDPREF_HF_TOKEN", "hf_someTokenThatIsNeverUsed1")
    monkeypatch.setenv("CROWDPREF_HF_REPO_ID", "crowdpref-tester/demo-rlhf")
    monkeypatch.setenv("CROWDPREF_HF_ENDPOINT", "http://127.0.0.1:9")
    result = publish_dataset(study=str(DEMO_STUDY), push=False)
    assert not result.pushed and "push=False" in result.message

    demo_run.run.preferences.unlink()
    with pytest.raises(CrowdprefError, match="run the aggregate-ratings flow first") as info:
        publish_dataset(study=str(DEMO_STUDY))
    assert "\n" not in str(info.value)


def test_a_settings_key_inside_the_data_stops_the_flow(demo_run: PlantedRun) -> None:
    from crowdpref.runfolder import write_parquet

    responses = pd.read_parquet(demo_run.run.responses)
    responses.loc[0, "text"] = f"use my key {demo_run.api_keys[2]} if you like"
    write_parquet(responses, demo_run.run.responses)
    with pytest.raises(CrowdprefError, match="refusing to publish") as info:
        publish_dataset(study=str(DEMO_STUDY), push=False)
    assert demo_run.api_keys[2] not in str(info.value)
    assert not (demo_run.run.path / "release").exists()


def test_masked_personal_details_are_reported_in_an_artifact(demo_run: PlantedRun) -> None:
    """An e-mail address and a Prolific id typed into an answer: masked in the release, counted
    (never shown) in the ``<study>-privacy`` artifact; the stage still succeeds."""
    from crowdpref.runfolder import write_parquet

    email, pid = "someone.real@example.org", "5f1d2a3b4c5d6e7f8a9b0c1d"
    responses = pd.read_parquet(demo_run.run.responses)
    responses.loc[0, "text"] = f"mail me at {email} (Prolific {pid})"
    write_parquet(responses, demo_run.run.responses)
    result = publish_dataset(study=str(DEMO_STUDY), push=False)
    texts = pd.read_parquet(result.folder / "data/responses/train-00000-of-00001.parquet")["text"]
    assert texts[0] == "mail me at [email removed] (Prolific [prolific-id removed])"
    artifact = _artifact_texts("demo-privacy")
    assert "| e-mail address | `[email removed]` | 1 | responses.text (1) |" in artifact
    assert "Prolific-style participant id" in artifact and "published to the day" in artifact
    assert email not in artifact and pid not in artifact


def test_the_flow_mirrors_a_dropped_configuration(demo_run: PlantedRun,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeHubServer() as hub:
        monkeypatch.setenv("CROWDPREF_HF_TOKEN", hub.write_token)
        monkeypatch.setenv("CROWDPREF_HF_REPO_ID", "crowdpref-tester/demo-rlhf")
        monkeypatch.setenv("CROWDPREF_HF_ENDPOINT", hub.url)
        publish_dataset(study=str(DEMO_STUDY))
        repo = hub.dataset("crowdpref-tester/demo-rlhf")
        assert "data/raters/train-00000-of-00001.parquet" in repo.files
        demo_run.run.file("raters.parquet").unlink()
        result = publish_dataset(study=str(DEMO_STUDY))
        assert "data/raters/train-00000-of-00001.parquet" not in repo.files
        assert repo.commits[-1]["deleted"] == ["data/raters/train-00000-of-00001.parquet"]
        local = {p.relative_to(result.folder).as_posix(): p.read_bytes()
                 for p in result.folder.rglob("*") if p.is_file()}
        assert repo.files == {**local, ".gitattributes": GITATTRIBUTES}


def test_an_undecided_phone_number_is_never_pushed(demo_run: PlantedRun, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's config without ``publish.privacy_undecided``: a phone number in an answer
    stops the flow before anything reaches the Hub, in one line naming the review file; once
    decided, the push goes ahead (kept, then masked: the masking push squashes the history, so no
    revision keeps the number). With the demo's own config it is masked at
    build time and the privacy artifact says so, and that no NER model looked for names."""
    import yaml

    from crowdpref.release import PrivacyError
    from crowdpref.release.review import decide, read_review
    from crowdpref.runfolder import write_parquet

    phone = "+44 20 7946 0958"
    responses = pd.read_parquet(demo_run.run.responses)
    responses.loc[0, "text"] = f"call me on {phone} about it"
    write_parquet(responses, demo_run.run.responses)
    data = yaml.safe_load(DEMO_STUDY.read_text())
    data["publish"].pop("privacy_undecided")
    study = tmp_path / "demo.yaml"
    study.write_text(yaml.safe_dump(data))
    with FakeHubServer() as hub:
        monkeypatch.setenv("CROWDPREF_HF_TOKEN", hub.write_token)
        monkeypatch.setenv("CROWDPREF_HF_REPO_ID", "crowdpref-tester/demo-rlhf")
        monkeypatch.setenv("CROWDPREF_HF_ENDPOINT", hub.url)
        with pytest.raises(PrivacyError, match="1 of 1 flagged row") as info:
            publish_dataset(study=str(study))
        review = demo_run.run.private_dir / "privacy-review.json"
        message = str(info.value)
        assert "\n" not in message and str(review) in message and phone not in message
        assert f"crowdpref privacy-review {study} --decide" in message
        assert hub.requests == [] and not (demo_run.run.path / "release").exists()

        decide(review, "keep")  # the operator keeps it at first ...
        assert publish_dataset(study=str(study)).pushed
        repo_id = "crowdpref-tester/demo-rlhf"
        assert phone.encode() in b"".join(hub.dataset(repo_id).files.values())
        [row] = read_review(review)
        decide(review, "mask", [row])  # ... then masks it: no earlier revision may keep it
        result = publish_dataset(study=str(study))
        assert result.pushed
        pushed = b"".join(hub.dataset(repo_id).files.values())
        assert phone.encode() not in pushed and b"[phone removed]" in pushed
        [revision] = hub.revisions(repo_id)  # the history was squashed
        files = hub.dataset(repo_id).files
        assert not any(phone.encode() in (hub.file_at(repo_id, revision, path) or b"") for path in files)

    review.unlink()
    publish_dataset(study=str(DEMO_STUDY), push=False)  # the demo's own config decides
    artifact = _artifact_texts("demo-privacy")
    assert "| phone number | 1 | 0 | 1 | 0 |" in artifact and "by the study config" in artifact
    assert "NO NAME OR PLACE DETECTION" in artifact and phone not in artifact
