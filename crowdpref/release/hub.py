"""The push to the Hugging Face Hub: :func:`push_release` makes a dataset repo equal to a built
release in one commit (files the release no longer has are deleted there) and, when asked (a
participant withdrew), squashes the repo's history so no earlier revision keeps what the
release left out; every failure is a one-line :class:`PushError` that never contains the token."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crowdpref.config import REPO_PART_RE
from crowdpref.errors import ConfigError, CrowdprefError, first_line
from crowdpref.release.build import release_folder
from crowdpref.runfolder import RELEASE_DIR

__all__ = [
    "DEFAULT_ENDPOINT",
    "HUB_KEEP",
    "PushError",
    "PushResult",
    "hub_dataset_url",
    "push_release",
    "release_files",
    "validate_repo_id",
]

DEFAULT_ENDPOINT = "https://huggingface.co"


class PushError(CrowdprefError):
    """The Hub refused or could not be reached. ``retryable`` is False for problems a retry
    cannot fix (credentials, permissions, offline mode)."""

    def __init__(self, message: str, retryable: bool = False):
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True)
class PushResult:
    """Where the release is: always the local folder; the Hub URL when it was pushed."""

    folder: Path
    pushed: bool
    repo_id: str | None = None
    url: str | None = None
    commit_url: str | None = None
    private: bool | None = None
    message: str = ""
    squashed: bool = False  # the history was squashed: the repo holds one revision, this release


def validate_repo_id(repo_id: str) -> str:
    """``owner/name`` as the Hub accepts it; a one-line :class:`crowdpref.errors.ConfigError`
    otherwise."""
    parts = repo_id.split("/") if isinstance(repo_id, str) else []
    ok = (len(parts) == 2 and all(REPO_PART_RE.fullmatch(p) for p in parts)
          and len(parts[1]) <= 96 and "--" not in repo_id and ".." not in repo_id)
    if not ok:
        raise ConfigError(
            f"Hub repo id {repo_id!r} is malformed: it must be 'owner/name' (letters, digits, "
            "'-', '_', '.'; no '--' or '..'): set CROWDPREF_HF_REPO_ID or publish.repo_id to "
            "e.g. my-org/social-reasoning-rlhf"
        )
    return repo_id


def hub_dataset_url(repo_id: str, endpoint: str | None = None) -> str:
    return f"{(endpoint or DEFAULT_ENDPOINT).rstrip('/')}/datasets/{repo_id}"


def _offline_now() -> bool:
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return bool(constants.HF_HUB_OFFLINE) or env.strip().upper() in {"1", "ON", "YES", "TRUE"}


def _clean(text: str, token: str) -> str:
    text = " ".join(str(text).split())
    if token:
        text = text.replace(token, "***")
    return re.sub(r"hf_[A-Za-z0-9]{8,}", "hf_***", text)[:160]


HUB_KEEP = frozenset({".gitattributes"})
"""Remote files a push never deletes: the Hub creates ``.gitattributes`` with a repo (its LFS
rules) and needs it; a release that has its own replaces it."""


def release_files(folder: Path) -> dict[str, Path]:
    """Path in the repo (POSIX) -> local file, for every file of a built release."""
    return {p.relative_to(folder).as_posix(): p for p in sorted(Path(folder).rglob("*"))
            if p.is_file()}


def _mirror(api: Any, repo_id: str, folder: Path) -> Any:
    """One commit that makes the repo's main branch equal to ``folder`` (see push_release)."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    from huggingface_hub.errors import RevisionNotFoundError

    local = release_files(folder)
    head = getattr(api.repo_info(repo_id, repo_type="dataset"), "sha", None)
    try:  # the listing is of the head commit, and the commit below is made on top of it only
        remote = set(api.list_repo_files(repo_id, repo_type="dataset", revision=head)) if head else set()
    except RevisionNotFoundError:  # a repo without any commit yet
        remote = set()
    stale = sorted(p for p in remote - set(local) if p not in HUB_KEEP)
    operations: list[Any] = [CommitOperationAdd(path_in_repo=path, path_or_fileobj=str(file))
                              for path, file in local.items()]
    operations += [CommitOperationDelete(path_in_repo=path) for path in stale]
    summary = "Publish dataset release (crowdpref)"
    if stale:
        summary += f": {len(stale)} file(s) no longer in the release deleted"
    return api.create_commit(repo_id=repo_id, repo_type="dataset", operations=operations,
                             commit_message=summary, parent_commit=head)


def history_must_go(withdrawals: int, privacy: Mapping[str, Any] | None) -> bool:
    """Whether a push must squash the dataset's history (:func:`push_release`'s
    ``squash_history``): when anyone withdrew from the study, or the privacy review masked or
    dropped a personal detail (``privacy.json``'s ``flagged_rows``) - an earlier revision may hold
    what this release leaves out (a decision changed after a push, a recogniser added since).
    Otherwise earlier revisions stay citable. Pure."""
    rows = (privacy or {}).get("flagged_rows") or {}
    return withdrawals > 0 or any(int(rows.get(decision) or 0) > 0 for decision in ("mask", "drop"))


def push_release(
    folder: Path,
    repo_id: str | None,
    token: str | None,
    private: bool = True,
    endpoint: str | None = None,
    squash_history: bool = False,
) -> PushResult:
    """Make the Hub dataset repo equal to a built release, in one commit:
    ``create_repo(exist_ok=True)``, ``list_repo_files``, then one ``create_commit`` that adds
    every file of the release and deletes every remote file the release does not have (a
    configuration dropped from the release disappears from the Hub), except the files the Hub
    itself keeps a repo working with (:data:`HUB_KEEP`, e.g. ``.gitattributes``) unless the
    release has its own. Unchanged files are not uploaded again and nothing at all is committed
    when nothing changed, so pushing again (or a retry) is safe. The commit names the head it
    was computed from (``parent_commit``): when another commit reached the repo in between (a
    second push, an edit on the Hub), the Hub refuses it (412) and the push fails, retryable,
    instead of committing deletions computed from a listing that is no longer true.

    ``squash_history``: then ``HfApi.super_squash_history`` makes the main branch one commit
    holding this release; every earlier revision - and whatever it held that the release no
    longer has (a withdrawn participant's rows) - is gone from the Hub. The caller asks for it
    by :func:`history_must_go` (``publish-dataset``). A failed squash after the commit is a retryable :class:`PushError`; the retry
    commits nothing and squashes.

    Without ``repo_id`` or ``token`` nothing is pushed and the result says where the folder is.
    Every failure is a one-line :class:`PushError` naming the repo, the endpoint and the setting
    to fix; it never contains the token."""
    folder = Path(folder)
    if folder.name == RELEASE_DIR and not folder.exists():
        folder = release_folder(folder.parent)  # a swap killed between its renames
    if not (folder / "README.md").is_file():
        raise CrowdprefError(f"{folder}: not a built release (no README.md): build it first")
    if not repo_id or not token:
        missing = " and ".join(n for n, v in (("CROWDPREF_HF_REPO_ID (or publish.repo_id)", repo_id),
                                              ("HF_TOKEN (or CROWDPREF_HF_TOKEN)", token)) if not v)
        return PushResult(folder=folder, pushed=False, repo_id=repo_id or None,
                          message=f"not pushed ({missing} not set): the release is in {folder}")
    validate_repo_id(repo_id)
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HfHubHTTPError, HfUriError, OfflineModeIsEnabled

    shown_endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
    where = f"{repo_id} at {shown_endpoint}"
    if _offline_now():
        raise PushError(f"cannot push {where}: offline mode is on (HF_HUB_OFFLINE is set): unset "
                        f"HF_HUB_OFFLINE to push, or unset CROWDPREF_HF_REPO_ID to keep the release "
                        f"in {folder}")
    api = HfApi(endpoint=shown_endpoint, token=token)
    try:
        try:
            repo_url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        except HfUriError:
            # huggingface_hub 2.4: after a 401/403 on create, create_repo(exist_ok=True) finds the
            # repo (repo_info succeeded) but cannot build its URL for a non-huggingface.co
            # endpoint. The repo exists; the upload below reports what the token may do.
            repo_url = None
        info = _mirror(api, repo_id, folder)
        if squash_history:
            api.super_squash_history(repo_id, repo_type="dataset", branch="main",
                                     commit_message="Publish dataset release (crowdpref): history squashed so no "
                                                    "earlier revision keeps data withdrawn since")
    except OfflineModeIsEnabled:
        raise PushError(f"cannot push {where}: offline mode is on (HF_HUB_OFFLINE is set): unset "
                        "HF_HUB_OFFLINE to push, or unset CROWDPREF_HF_REPO_ID") from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        detail = _clean(getattr(exc, "server_message", None) or first_line(exc, None), token)
        if status == 401:
            msg = (f"the Hub refused the token for {where} (401 unauthorized): set HF_TOKEN "
                   "(or CROWDPREF_HF_TOKEN) to a valid write token")
            raise PushError(msg) from None
        if status == 403:
            msg = (f"the token may not write to {where} (403 forbidden: {detail}): use a token "
                   "with write access (HF_TOKEN / CROWDPREF_HF_TOKEN) or a repo you own "
                   "(CROWDPREF_HF_REPO_ID)")
            raise PushError(msg) from None
        if status == 404:
            msg = (f"{where}: not found (404): check CROWDPREF_HF_REPO_ID and "
                   "CROWDPREF_HF_ENDPOINT, and that the token (HF_TOKEN) can see the owner")
            raise PushError(msg) from None
        if status == 412:
            raise PushError(f"another commit reached {where} while this push was computing its "
                            "changes (412 precondition failed): push again; the next push lists "
                            "the repo afresh", retryable=True) from None
        retry = status is None or status >= 500 or status == 429
        raise PushError(f"pushing {where} failed (HTTP {status}: {detail}): "
                        + ("try again later" if retry else "check CROWDPREF_HF_REPO_ID / HF_TOKEN"),
                        retryable=retry) from None
    except (OSError, ConnectionError) as exc:  # httpx transport errors, refused connections
        raise PushError(f"cannot reach the Hub for {where} ({type(exc).__name__}: "
                        f"{_clean(str(exc), token)}): check the network and "
                        "CROWDPREF_HF_ENDPOINT", retryable=True) from None
    except Exception as exc:  # noqa: BLE001 - e.g. httpx errors that are not OSError
        if type(exc).__module__.startswith(("httpx", "httpcore")):
            raise PushError(f"cannot reach the Hub for {where} ({type(exc).__name__}: "
                            f"{_clean(str(exc), token)}): check the network and "
                            "CROWDPREF_HF_ENDPOINT", retryable=True) from None
        raise
    url = str(repo_url) if repo_url else hub_dataset_url(repo_id, shown_endpoint)
    return PushResult(folder=folder, pushed=True, repo_id=repo_id, url=url,
                      commit_url=None if squash_history else getattr(info, "commit_url", None), private=private,
                      message=f"pushed {folder} to {url}" + ("; history squashed (earlier revisions deleted)"
                                                             if squash_history else ""),
                      squashed=squash_history)
