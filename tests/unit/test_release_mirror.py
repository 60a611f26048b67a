"""Releases as a whole: the Hub repo is made EQUAL to the release in one commit (a configuration
dropped from the release is deleted on the Hub), and the local swap of ``release/`` survives
being killed at any point (the next build or reader puts a complete release back and cleans
what the killed build left).

The push goes through the real ``huggingface_hub.HfApi`` (list_repo_files + create_commit) to
the fake Hub in tests/fakes/hub_server.py; the kills are real: an exception that nothing catches
at each rename of the swap, and a SIGKILL of a build process between the two renames that move
the old release out and the new one in."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

import crowdpref.runfolder as runfolder
from crowdpref.errors import CrowdprefError
from crowdpref.release import PushError, build_release, push_release, release_folder
from crowdpref.runfolder import OLD_PREFIX, READY_PREFIX, STAGING_PREFIX, repair_release
from tests.fakes.hub_server import GITATTRIBUTES, FakeHubServer
from tests.unit.test_publish import PlantedRun, build, small_config, write_study_run

REPO = Path(__file__).resolve().parents[2]
SCREENING = "data/screening/train-00000-of-00001.parquet"


@pytest.fixture()
def planted(tmp_path: Path) -> PlantedRun:
    return write_study_run(tmp_path / "runs" / "pub-test", small_config())


@pytest.fixture()
def hub() -> FakeHubServer:
    with FakeHubServer() as server:
        yield server


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def leftovers(run_path: Path) -> list[str]:
    return sorted(p.name for p in run_path.iterdir()
                  if p.name.startswith((STAGING_PREFIX, READY_PREFIX, OLD_PREFIX)))


def assert_complete(folder: Path) -> None:
    """A whole release: its card and every data file readable."""
    assert (folder / "README.md").read_text().startswith("---\n")
    data = sorted(folder.glob("data/*/train-*.parquet"))
    assert len(data) >= 5
    for path in data:
        pq.read_table(path)


# --- the Hub mirror -------------------------------------------------------------------------------
def test_a_configuration_dropped_from_the_release_is_deleted_on_the_hub_in_one_commit(
        planted: PlantedRun, hub: FakeHubServer) -> None:
    hub.tree_page_size = 3  # the listing spans several pages: every one must be read
    folder = build(planted, repo_id="me/social-rlhf")
    assert (folder / SCREENING).exists()
    push_release(folder, "me/social-rlhf", hub.write_token, endpoint=hub.url)
    repo = hub.dataset("me/social-rlhf")
    assert SCREENING in repo.files

    # the next release has no screening configuration
    planted.run.screening.unlink()
    folder = build_release(planted.run, planted.config, forbidden=planted.forbidden,
                           repo_id="me/social-rlhf")
    assert not (folder / "data/screening").exists()
    commits_before = len(repo.commits)
    posts_before = [r for r in hub.requests if r[0] == "POST" and "/commit/" in r[1]]
    result = push_release(folder, "me/social-rlhf", hub.write_token, endpoint=hub.url)

    assert result.pushed
    assert repo.files == {**files_of(folder), ".gitattributes": GITATTRIBUTES}  # equal, Hub file kept
    assert SCREENING not in repo.files
    assert len(repo.commits) == commits_before + 1  # ONE commit: the new card and the deletion
    commits = [r for r in hub.requests if r[0] == "POST" and "/commit/" in r[1]]
    assert len(commits) == len(posts_before) + 1
    last = repo.commits[-1]
    assert last["deleted"] == [SCREENING] and "README.md" in last["files"]
    listings = [r for r in hub.requests if r == ("GET", f"/api/datasets/me/social-rlhf/tree/{repo.commits[-2]['oid']}")]
    assert len(listings) > 1  # the listing of the head it committed on spanned pages, each read


def test_files_added_on_the_hub_by_hand_go_and_a_release_gitattributes_replaces_the_hubs(
        planted: PlantedRun, hub: FakeHubServer) -> None:
    folder = build(planted)
    push_release(folder, "me/social-rlhf", hub.write_token, endpoint=hub.url)
    repo = hub.dataset("me/social-rlhf")
    repo.files["notes/draft.md"] = b"someone's notes"  # not part of the release
    repo.files["data/old_config/train-00000-of-00001.parquet"] = b"PAR1"
    push_release(folder, "me/social-rlhf", hub.write_token, endpoint=hub.url)
    assert repo.files == {**files_of(folder), ".gitattributes": GITATTRIBUTES}
    assert repo.commits[-1]["deleted"] == ["data/old_config/train-00000-of-00001.parquet",
                                           "notes/draft.md"]

    (folder / ".gitattributes").write_bytes(b"*.parquet binary\n")  # a release with its own
    push_release(folder, "me/social-rlhf", hub.write_token, endpoint=hub.url)
    assert repo.files[".gitattributes"] == b"*.parquet binary\n"
    assert repo.files == files_of(folder)


def test_an_unchanged_release_commits_nothing(planted: PlantedRun, hub: FakeHubServer) -> None:
    folder = build(planted)
    push_release(folder, "me/social-rlhf", hub.write_token, endpoint=hub.url)
    commits = len(hub.dataset("me/social-rlhf").commits)
    push_release(folder, "me/social-rlhf", hub.write_token, endpoint=hub.url)
    assert len(hub.dataset("me/social-rlhf").commits) == commits


def test_a_commit_that_lands_between_listing_and_committing_fails_the_push_retryably(
        planted: PlantedRun, hub: FakeHubServer) -> None:
    folder = build(planted)
    push_release(folder, "me/social-rlhf", hub.write_token, endpoint=hub.url)
    repo = hub.dataset("me/social-rlhf")
    planted.run.screening.unlink()  # the next release drops a configuration: a deletion to compute
    folder = build_release(planted.run, planted.config, forbidden=planted.forbidden, repo_id="me/social-rlhf")
    hub.commit_after_listing["datasets/me/social-rlhf"] = {"notes/late.md": b"pushed meanwhile"}
    commits = len(repo.commits)
    with pytest.raises(PushError, match="another commit reached me/social-rlhf") as refused:
        push_release(folder, "me/social-rlhf", hub.write_token, endpoint=hub.url)
    assert refused.value.retryable  # the publish task's retry lists the repo afresh
    assert len(repo.commits) == commits + 1 and repo.commits[-1]["summary"] == "another writer"
    assert SCREENING in repo.files  # nothing of the refused push was applied

    push_release(folder, "me/social-rlhf", hub.write_token, endpoint=hub.url)  # the retry
    assert repo.files == {**files_of(folder), ".gitattributes": GITATTRIBUTES}
    assert repo.commits[-1]["deleted"] == [SCREENING, "notes/late.md"]


# --- the local swap --------------------------------------------------------------------------------
class Killed(BaseException):
    """Stands for a kill: nothing in crowdpref catches it."""


@pytest.mark.parametrize("kill_at", [1, 2, 3], ids=["before-marking-ready", "after-ready",
                                                   "between-the-two-swap-renames"])
def test_a_swap_killed_at_any_rename_is_repaired(planted: PlantedRun, kill_at: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The swap's renames: 1 staging -> ready, 2 release -> old, 3 ready -> release. Killed
    before rename ``kill_at``: afterwards ``release/`` is missing at worst between 2 and 3, and
    every reader and the next build put a complete release back."""
    old = files_of(build(planted))
    answers = pd.read_parquet(planted.run.responses)
    answers.loc[0, "text"] = "A changed answer: listen, then ask what they need."
    answers.to_parquet(planted.run.responses, index=False)

    calls = []
    real_replace = os.replace

    def replace(src: object, dst: object) -> None:
        calls.append(Path(str(dst)).name)
        if len(calls) == kill_at:
            raise Killed()
        real_replace(src, dst)

    monkeypatch.setattr(runfolder.os, "replace", replace)
    with pytest.raises(Killed):
        build(planted)
    monkeypatch.setattr(runfolder.os, "replace", real_replace)

    release = planted.run.path / "release"
    assert release.exists() == (kill_at != 3)
    repaired = release_folder(planted.run)  # what every reader (scan, push) does first
    assert repaired == release and leftovers(planted.run.path) == []
    assert_complete(release)
    texts = pd.read_parquet(release / "data/responses/train-00000-of-00001.parquet")["text"]
    if kill_at == 3:  # the new release was complete and scanned: it is the one put back
        assert "A changed answer: listen, then ask what they need." in texts.tolist()
    else:  # killed before the old release moved aside: the old one stays
        assert files_of(release) == old
    again = build(planted)  # and the next build works as usual
    assert_complete(again)
    assert leftovers(planted.run.path) == []


def test_a_build_sigkilled_between_the_swap_renames(planted: PlantedRun) -> None:
    """A real SIGKILL of a build process at the worst moment (the old release moved aside, the
    new one not yet in): no ``release/``; the next run puts the new, complete one in place."""
    build(planted)
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(REPO)!r})
        import crowdpref.runfolder as runfolder
        from crowdpref.release import build_release
        from crowdpref.runfolder import RunFolder
        from tests.unit.test_publish import small_config
        real = os.replace
        def replace(src, dst):
            if os.path.basename(str(dst)) == "release":
                os.kill(os.getpid(), signal.SIGKILL)
            real(src, dst)
        runfolder.os.replace = replace
        from pathlib import Path
        build_release(RunFolder(Path({str(planted.run.path)!r})), small_config())
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    run_path = planted.run.path
    assert not (run_path / "release").exists()
    assert [n.split("-")[1] for n in leftovers(run_path)] == ["old", "ready"]

    folder = build(planted)  # the next build repairs first, then builds
    assert_complete(folder)
    assert leftovers(run_path) == []


def test_push_of_a_missing_release_repairs_it_first(planted: PlantedRun, hub: FakeHubServer) -> None:
    folder = build(planted)
    os.replace(folder, planted.run.path / f"{OLD_PREFIX}00000000000000000001-abcdef")
    result = push_release(folder, "me/social-rlhf", hub.write_token, endpoint=hub.url)
    assert result.pushed and folder.is_dir()
    assert hub.dataset("me/social-rlhf").files["README.md"] == (folder / "README.md").read_bytes()


# --- stale staging ---------------------------------------------------------------------------------
def test_stale_staging_is_cleaned_by_the_next_build(planted: PlantedRun) -> None:
    run_path = planted.run.path
    good = build(planted)
    for name in (f"{STAGING_PREFIX}00000000000000000001-aaaaaa",  # a killed build of today
                 f"{STAGING_PREFIX}k2j4h5g6",                     # one of the older mkdtemp names
                 f"{OLD_PREFIX}deadbeef",
                 f"{READY_PREFIX}00000000000000000002-bbbbbb"):
        (run_path / name / "data" / "default").mkdir(parents=True)
        (run_path / name / "data" / "default" / "train-00000-of-00001.parquet").write_bytes(b"half")
    assert len(leftovers(run_path)) == 4
    assert build(planted) == good and leftovers(run_path) == []
    assert_complete(good)


def test_an_incomplete_staging_is_never_promoted(planted: PlantedRun) -> None:
    """Only a ready (complete, scanned) copy or the previous release may become release/."""
    run_path = planted.run.path
    (run_path / f"{STAGING_PREFIX}00000000000000000001-aaaaaa" / "data").mkdir(parents=True)
    assert repair_release(run_path) is None and leftovers(run_path) == []
    with pytest.raises(CrowdprefError, match="run the publish-dataset flow") as info:
        release_folder(planted.run)
    assert "\n" not in str(info.value)


def test_repair_puts_the_previous_release_back_when_nothing_newer_is_ready(
        planted: PlantedRun) -> None:
    run_path = planted.run.path
    before = files_of(build(planted))
    os.replace(run_path / "release", run_path / f"{OLD_PREFIX}00000000000000000001-abcdef")
    (run_path / f"{STAGING_PREFIX}00000000000000000002-aaaaaa").mkdir()
    assert repair_release(run_path) == run_path / "release"
    assert files_of(run_path / "release") == before and leftovers(run_path) == []


# --- squashing the history after a withdrawal -------------------------------------------------------
def test_a_squashed_push_leaves_no_earlier_revision_holding_what_the_release_dropped(
        planted: PlantedRun, hub: FakeHubServer) -> None:
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RevisionNotFoundError

    api = HfApi(endpoint=hub.url, token=hub.write_token)
    folder = build(planted, repo_id="me/social-rlhf")
    push_release(folder, "me/social-rlhf", hub.write_token, endpoint=hub.url)
    first = hub.revisions("me/social-rlhf")[-1]
    assert hub.file_at("me/social-rlhf", first, SCREENING) is not None

    planted.run.screening.unlink()  # what the next release no longer has (as a withdrawal's rows)
    folder = build_release(planted.run, planted.config, forbidden=planted.forbidden, repo_id="me/social-rlhf")
    push_release(folder, "me/social-rlhf", hub.write_token, endpoint=hub.url)  # not squashed: history kept
    assert hub.file_at("me/social-rlhf", first, SCREENING) is not None
    assert SCREENING in {f.path for f in api.list_repo_tree("me/social-rlhf", repo_type="dataset",
                                                            revision=first, recursive=True)}
    assert len(api.list_repo_commits("me/social-rlhf", repo_type="dataset")) == 3

    result = push_release(folder, "me/social-rlhf", hub.write_token, endpoint=hub.url, squash_history=True)
    assert result.squashed and "history squashed" in result.message
    commits = api.list_repo_commits("me/social-rlhf", repo_type="dataset")
    assert len(commits) == 1 and hub.revisions("me/social-rlhf") == [commits[0].commit_id]
    assert hub.file_at("me/social-rlhf", first, SCREENING) is None
    with pytest.raises(RevisionNotFoundError):
        list(api.list_repo_tree("me/social-rlhf", repo_type="dataset", revision=first))
    assert hub.dataset("me/social-rlhf").files == {**files_of(folder), ".gitattributes": GITATTRIBUTES}
    assert ("POST", "/api/datasets/me/social-rlhf/super-squash/main") in hub.requests
