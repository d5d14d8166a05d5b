"""Hub datasets pinned to one commit, read file by file from the hub or from a local mirror of the repository.

Current ``datasets`` (5.x) runs no loading scripts, and two of the paper's datasets are script repositories
(``openai/summarize_from_feedback``, ``openai/webgpt_comparisons``), so no dataset is loaded by name: each
adapter names the repository, a commit (for script repositories, a commit of the hub's Parquet export,
``refs/convert/parquet``) and the files that hold each split at that commit. A split's files come from

* the hub: ``huggingface_hub.hf_hub_download`` at the pinned commit (cached under ``HF_HUB_CACHE``; a warm
  cache works offline, ``HF_ENDPOINT`` selects a mirror server), or
* a local mirror: a directory laid out as the repository at that commit, as
  ``hf download REPO --repo-type dataset --revision SHA --local-dir DIR`` writes it (``--data_path DIR``).

Both give a local file path that the same readers (:mod:`dschat.data.records`) turn into rows.
The pinned commits were read from the hub's web pages without network access to the hub; docs/data.md
says so, and a commit the hub no longer serves fails with a one-line error naming the way out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from .errors import DataError


@dataclass(frozen=True)
class DatasetSource:
    """Where a dataset's splits live: a hub repository at one commit (or none: local files only).

    ``splits`` maps the split names callers use (``train``, ``validation``, ``test``) to the source's split
    names; ``files`` maps each source split to the one repository path that holds it at ``revision``.
    ``eval_held_out`` marks a source without an evaluation split: its ``validation`` split is the held-out
    part of ``train`` (:mod:`dschat.data.holdout`).
    """

    name: str
    splits: Mapping[str, str]
    repo: Optional[str] = None
    revision: Optional[str] = None
    files: Mapping[str, str] = field(default_factory=dict)
    eval_held_out: bool = False

    def hub_split(self, split: str) -> str:
        if split not in self.splits:
            raise DataError(f"{self.name}: unknown split {split!r}; known splits: {', '.join(self.splits)}")
        return self.splits[split]

    def label(self, hub_split: str) -> str:
        """How rows read from the hub are named in messages: ``repo@commit:path``."""
        return f"{self.repo}@{self.revision[:7]}:{self.files[hub_split]}"

    def download_command(self, hub_split: str) -> str:
        return (f"hf download {self.repo} {self.files[hub_split]} --repo-type dataset "
                f"--revision {self.revision} --local-dir DIR")


def mirror_file(source: DatasetSource, hub_split: str, mirror: Path) -> Optional[Path]:
    """The split's file under ``mirror`` laid out as the repository, or None when it is not there."""
    if hub_split not in source.files:
        return None
    path = mirror / source.files[hub_split]
    return path if path.is_file() else None


def download_file(source: DatasetSource, hub_split: str) -> Path:
    """The split's file from the hub at the pinned commit (from the HF cache when there); one-line errors."""
    import huggingface_hub
    from huggingface_hub.errors import (EntryNotFoundError, LocalEntryNotFoundError, RepositoryNotFoundError,
                                        RevisionNotFoundError)

    relative = source.files[hub_split]
    try:
        return Path(huggingface_hub.hf_hub_download(source.repo, relative, repo_type="dataset",
                                                    revision=source.revision))
    except LocalEntryNotFoundError:
        raise DataError(
            f"{source.label(hub_split)}: cannot reach the hub and the file is not in the HF cache; on a machine "
            f"with network run `{source.download_command(hub_split)}` and pass --data_path DIR"
        ) from None
    except (RevisionNotFoundError, EntryNotFoundError, RepositoryNotFoundError) as error:
        raise DataError(
            f"{source.label(hub_split)}: the hub does not serve this file at commit {source.revision} "
            f"({type(error).__name__}); pass --data_path with a local copy of the dataset's files"
        ) from None
    except Exception as error:  # HTTP, network and file-system errors have many types; all end here
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise DataError(f"{source.label(hub_split)}: could not download ({type(error).__name__}: {first_line}); "
                        "pass --data_path with a local copy of the dataset's files") from None
