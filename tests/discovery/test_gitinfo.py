"""The fast git reader against the real ``git`` on real repositories (spec §6.1)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import anyio
import pytest

from pi_cross_session._internal.protocol.io import gitinfo
from pi_cross_session._internal.protocol.io.gitinfo import (
    NeedsGit,
    git_rev_parse,
    read_git_files,
    resolve_git_info,
)
from pi_cross_session._internal.protocol.registration import GitInfo, parse_git_output
from tests.discovery.conftest import GIT, git, make_repo, needs_git
from tests.support.bounds import MUST_HAPPEN_S

pytestmark = [needs_git, pytest.mark.usefixtures("git_env")]


def git_says(cwd: Path | str) -> GitInfo | None:
    """What the reference's command gives for ``cwd``."""
    assert GIT is not None
    completed = subprocess.run(
        [GIT, "-C", str(cwd), "rev-parse", "--show-toplevel", "HEAD", "--abbrev-ref", "HEAD"],
        capture_output=True,
        check=False,
    )
    if completed.returncode != 0:
        return None
    return parse_git_output(completed.stdout.decode("utf-8", "replace"))


def fast_matches_git(cwd: Path | str) -> GitInfo | None:
    """The fast reader settles ``cwd`` by itself and agrees with git; returns the answer."""
    fast = read_git_files(str(cwd))
    assert not isinstance(fast, NeedsGit), fast
    assert fast == git_says(cwd)
    return fast


#: The time budget given to git by tests about its answer rather than its budget: the real 1.5 s
#: (GIT_TIMEOUT_S) is too little for a git process started on a loaded machine.
PATIENT_S = MUST_HAPPEN_S


def resolve_one(cwd: Path | str, *, timeout_s: float = PATIENT_S) -> GitInfo | None:
    return anyio.run(lambda: resolve_git_info([str(cwd)], timeout_s=timeout_s))[str(cwd)]


def rev_parse(cwd: Path | str, **kwargs: object) -> GitInfo | None:
    """:func:`git_rev_parse` with the patient budget unless a test gives its own."""
    kwargs.setdefault("timeout_s", PATIENT_S)
    return anyio.run(lambda: git_rev_parse(str(cwd), **kwargs))  # type: ignore[arg-type]


def head_of(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


# -- the ordinary cases, settled without git -------------------------------------------------------


def test_repo_on_a_branch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    info = fast_matches_git(repo)
    assert info == GitInfo(worktree=str(repo.resolve()), branch="main", head=head_of(repo))


def test_subdirectory_cwd(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    sub = repo / "a" / "b"
    sub.mkdir(parents=True)
    info = fast_matches_git(sub)
    assert info is not None
    assert info.worktree == str(repo)


def test_detached_head(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    git(repo, "checkout", "-q", "--detach")
    info = fast_matches_git(repo)
    assert info is not None
    assert info.branch is None


def test_branch_with_a_slash(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    git(repo, "checkout", "-q", "-b", "feature/x")
    info = fast_matches_git(repo)
    assert info is not None
    assert info.branch == "feature/x"


def test_packed_refs_only(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    git(repo, "checkout", "-q", "-b", "feature/packed")
    git(repo, "tag", "v1")
    git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "heads" / "feature" / "packed").exists()
    info = fast_matches_git(repo)
    assert info is not None
    assert info.branch == "feature/packed"


def test_loose_ref_wins_over_a_stale_packed_one(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    git(repo, "pack-refs", "--all")
    (repo / "file.txt").write_text("second\n")
    git(repo, "commit", "-q", "-am", "second")  # writes a loose ref newer than the packed one
    info = fast_matches_git(repo)
    assert info is not None
    assert info.head == head_of(repo)


def test_linked_worktree(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    worktree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "wt/branch", str(worktree))
    (worktree / "sub").mkdir()
    for cwd in (worktree, worktree / "sub"):
        info = fast_matches_git(cwd)
        assert info == GitInfo(worktree=str(worktree), branch="wt/branch", head=head_of(repo))
    assert fast_matches_git(repo) is not None


def test_linked_worktree_after_pack_refs(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    worktree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "side", str(worktree))
    git(repo, "pack-refs", "--all")
    info = fast_matches_git(worktree)
    assert info is not None
    assert info.branch == "side"


def test_detached_linked_worktree(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    worktree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "--detach", str(worktree))
    info = fast_matches_git(worktree)
    assert info is not None
    assert info.branch is None


def test_unborn_branch_is_none_like_git(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "fresh", commit=False)
    assert read_git_files(str(repo)) is None
    assert git_says(repo) is None


def test_not_a_repo(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert fast_matches_git(plain) is None


def test_missing_empty_and_relative_cwds_are_none(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    assert read_git_files(str(tmp_path / "missing")) is None
    assert read_git_files("") is None
    assert read_git_files(os.path.relpath(repo)) is None
    assert read_git_files("/x\0y") is None
    assert read_git_files(str(repo / "file.txt")) is None  # a file, not a dir


def test_symlinked_cwd_reports_the_physical_top_level(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    link = tmp_path / "link"
    link.symlink_to(repo)
    info = fast_matches_git(link)
    assert info is not None
    assert info.worktree == str(repo)


def test_separate_git_dir_file(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "--separate-git-dir", str(tmp_path / "store.git"))
    (work / "f").write_text("x")
    git(work, "add", "f")
    git(work, "commit", "-q", "-m", "m")
    assert (work / ".git").is_file()
    info = fast_matches_git(work)
    assert info is not None
    assert info.branch == "main"


def test_submodule(tmp_path: Path) -> None:
    upstream = make_repo(tmp_path / "upstream")
    outer = make_repo(tmp_path / "outer")
    git(outer, "submodule", "add", "-q", str(upstream), "mods/sub")
    sub = outer / "mods" / "sub"
    assert (sub / ".git").is_file()
    # core.worktree in the module's config points back at the checkout: still the fast path.
    info = fast_matches_git(sub)
    assert info is not None
    assert info.worktree == str(sub)
    assert info.head == head_of(upstream)


def test_sha256_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "--object-format=sha256")
    (repo / "f").write_text("x")
    git(repo, "add", "f")
    git(repo, "commit", "-q", "-m", "m")
    info = fast_matches_git(repo)
    assert info is not None
    assert len(info.head) == 64


def test_invalid_dot_git_dir_is_passed_over_like_git(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    inner = repo / "inner"
    (inner / ".git").mkdir(parents=True)  # not a repository: git keeps walking up
    info = fast_matches_git(inner)
    assert info is not None
    assert info.worktree == str(repo)


def test_harmless_config_values_do_not_need_git(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    git(repo, "config", "core.pager", 'less -R "x" ; y')
    git(repo, "config", "user.name", "a # b")
    fast_matches_git(repo)


# -- cases left to git -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shadow",
    ["refs/tags/main", "refs/remotes/main/HEAD", "refs/remotes/main", "refs/main"],
)
def test_branch_shadowed_by_another_ref_is_left_to_git(tmp_path: Path, shadow: str) -> None:
    repo = make_repo(tmp_path / "repo")
    git(repo, "update-ref", shadow, "HEAD")
    assert isinstance(read_git_files(str(repo)), NeedsGit)
    info = resolve_one(repo)
    assert info == git_says(repo)
    assert info is not None
    assert info.branch == "heads/main"


def test_branch_shadowed_by_a_packed_tag_is_left_to_git(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    git(repo, "tag", "main")
    git(repo, "pack-refs", "--all")
    assert isinstance(read_git_files(str(repo)), NeedsGit)
    assert resolve_one(repo) == git_says(repo)


@pytest.mark.parametrize(
    "config",
    [
        "[extensions]\n\trefStorage = reftable\n",
        "[extensions]\n\tworktreeConfig = true\n",
        "[extensions]\n\tsomethingNew = 1\n",
        '[include]\n\tpath = "other"\n',
        "[core]\n\tbare = true\n",
        "[core]\n\tworktree = /elsewhere\n",
        '[core]\n\tbare = "false"\n',
        "[core]\n\trepositoryformatversion = 2\n",
        "[core] bare = false\n",
        "[core]\n\tbare = \\\n false\n",
    ],
)
def test_config_the_reader_does_not_interpret(tmp_path: Path, config: str) -> None:
    repo = make_repo(tmp_path / "repo")
    with (repo / ".git" / "config").open("a") as handle:
        handle.write(config)
    assert isinstance(read_git_files(str(repo)), NeedsGit)
    assert resolve_one(repo) == git_says(repo)


def test_bare_repository_and_inside_the_git_dir(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    bare = tmp_path / "bare.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    for cwd in (bare, repo / ".git", repo / ".git" / "refs"):
        assert isinstance(read_git_files(str(cwd)), NeedsGit)
        assert resolve_one(cwd) == git_says(cwd)


def test_symlinked_head_is_left_to_git(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    head = repo / ".git" / "HEAD"
    head.unlink()
    head.symlink_to("refs/heads/main")
    assert isinstance(read_git_files(str(repo)), NeedsGit)
    assert resolve_one(repo) == git_says(repo)


def test_symbolic_ref_chain_is_left_to_git(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    git(repo, "symbolic-ref", "refs/heads/alias", "refs/heads/main")
    git(repo, "symbolic-ref", "HEAD", "refs/heads/alias")
    assert isinstance(read_git_files(str(repo)), NeedsGit)
    assert resolve_one(repo) == git_says(repo)


def test_discovery_variables_are_left_to_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert isinstance(read_git_files(str(repo)), NeedsGit)
    assert resolve_one(repo) == git_says(repo)


def test_our_git_dir_variable_does_not_redirect_a_peer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = make_repo(tmp_path / "ours")
    theirs = make_repo(tmp_path / "theirs")
    git(theirs, "checkout", "-q", "-b", "their-branch")
    # Before GIT_DIR is set: afterwards git itself would answer for ours. (The two repositories'
    # commits have the same hash only when both were made within one second.)
    expected = GitInfo(worktree=str(theirs), branch="their-branch", head=head_of(theirs))
    monkeypatch.setenv("GIT_DIR", str(ours / ".git"))
    assert read_git_files(str(theirs)) == expected
    # Even the fallback command ignores it.
    assert rev_parse(theirs) == expected


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_repository_of_another_user_is_left_to_git(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    os.chown(repo, 12345, 12345)
    assert isinstance(read_git_files(str(repo)), NeedsGit)
    assert resolve_one(repo) == git_says(repo)  # git's safe.directory check: None


# -- hostile files ---------------------------------------------------------------------------------


def test_fifo_head_cannot_hang_a_listing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    head = repo / ".git" / "HEAD"
    head.unlink()
    os.mkfifo(head)
    assert isinstance(read_git_files(str(repo)), NeedsGit)
    started = time.monotonic()
    # git itself blocks opening the FIFO; the fallback is killed at the deadline (without it,
    # the listing would hang for good: any bound well short of that shows the kill).
    assert resolve_one(repo, timeout_s=0.5) is None
    assert time.monotonic() - started < MUST_HAPPEN_S


def test_oversized_head_is_refused(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / ".git" / "HEAD").write_bytes(b"ref: refs/heads/" + b"a" * 10_000 + b"\n")
    assert isinstance(read_git_files(str(repo)), NeedsGit)


def test_garbage_files_never_raise(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    git_dir = repo / ".git"
    for head in (b"", b"ref: refs/heads/../../x\n", b"\xff\xfe\n", b"ref: refs/heads/\n", b"zz\n"):
        (git_dir / "HEAD").write_bytes(head)
        assert isinstance(read_git_files(str(repo)), NeedsGit | None)
    (git_dir / "HEAD").write_bytes(b"ref: refs/heads/main\n")
    (git_dir / "refs" / "heads" / "main").write_bytes(b"not an id\n")
    assert isinstance(read_git_files(str(repo)), NeedsGit)
    (git_dir / "refs" / "heads" / "main").unlink()
    (git_dir / "packed-refs").write_bytes(b"# pack-refs with: peeled\nXYZ refs/heads/main\n")
    assert read_git_files(str(repo)) is None  # unborn as far as files go; git agrees
    assert git_says(repo) is None


def test_garbage_dot_git_file(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    for content in (b"", b"gitdir: \n", b"gitdir: /nowhere\n", b"nonsense\n", b"x" * 9000):
        (work / ".git").write_bytes(content)
        assert isinstance(read_git_files(str(work)), NeedsGit)
        assert resolve_one(work) is None


# -- the batch -------------------------------------------------------------------------------------


def test_batch_deduplicates_and_covers_every_cwd(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    plain = tmp_path / "plain"
    plain.mkdir()
    cwds = [str(repo), str(plain), str(repo), "relative"]
    result = anyio.run(lambda: resolve_git_info(cwds, timeout_s=PATIENT_S))
    assert list(result) == [str(repo), str(plain), "relative"]
    assert result[str(repo)] == git_says(repo)
    assert result[str(plain)] is None
    assert result["relative"] is None
    assert anyio.run(resolve_git_info, []) == {}


def test_batch_with_no_time_left_gives_none(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    assert resolve_one(repo, timeout_s=0.0) is None


def test_fallback_runs_at_most_the_configured_number_of_gits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repos = [make_repo(tmp_path / f"r{i}") for i in range(5)]
    for repo in repos:
        git(repo, "tag", "main")  # forces the fallback
    running = 0
    peak = 0
    real = gitinfo.git_rev_parse

    async def counting(cwd: str, **kwargs: object) -> GitInfo | None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            return await real(cwd, **kwargs)  # type: ignore[arg-type]
        finally:
            running -= 1

    monkeypatch.setattr(gitinfo, "git_rev_parse", counting)
    result = anyio.run(
        lambda: resolve_git_info([str(r) for r in repos], max_subprocesses=2, timeout_s=PATIENT_S)
    )
    assert peak == 2
    assert all(info is not None and info.branch == "heads/main" for info in result.values())


def test_git_rev_parse_caps_output_and_handles_missing_git(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    assert rev_parse(repo, output_cap_bytes=10) is None
    assert rev_parse(repo, git=str(tmp_path / "no-git")) is None
    assert rev_parse("relative") is None
    assert rev_parse(repo) == git_says(repo)
