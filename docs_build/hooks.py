"""mkdocs hook: the site is docs/ plus the repository's README (the home page) and the course's
pages in labs/, with every relative link rewritten from the repository's layout to the site's.

mkdocs refuses the repository root as its docs_dir, so `on_files` adds README.md (as index.md)
and every labs/ page as generated files. The markdown stays written for GitHub (links relative
to the file in the repository: `docs/ci.md` from the README, `../benchmarks/results/x.png`
from docs/); `on_page_markdown` rewrites each relative link by where its target lands:

- a page of the site: the link to that page (`docs/ci.md` from the README becomes `ci.md`);
  a folder with a README on the site: that README;
- an image elsewhere in the repository (`benchmarks/results/*.png`): the image, copied into
  the site under `repo/` (`on_files` finds them before the pages are built);
- any other file or folder of the repository (`scenarios/x.toml`, `benchmarks/y.py`): its
  path as text, since the site does not hold it;
- nothing in the repository: a warning, which `mkdocs build --strict` turns into a failure.

Links inside code (fenced blocks, inline code) are text and left alone.
"""

from __future__ import annotations

import logging
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

log = logging.getLogger("mkdocs.hooks.site_pages")
"""Under mkdocs' own logger, so `--strict` counts its warnings."""

HOME_PAGE = "README.md"
"""The repository's README: the site's home page, index.md."""
DOCS_FOLDER = "docs"
"""mkdocs.yml's docs_dir: its files are the site's files at the same path below it."""
LABS_FOLDER = "labs"
"""The course: its .md pages join the site at the same paths (labs/README.md, labs/NN-*/README.md)."""
LABS_CODE_FOLDERS = frozenset({"starter", "solution"})
"""Folders of an exercise that hold the student's and the reference code, not pages."""
COPIED_ASSETS = "repo"
"""Where images from outside docs/ land on the site: repo/<their path in the repository>."""
IMAGE_SUFFIXES = frozenset({".png", ".svg", ".jpg", ".jpeg", ".gif", ".webp"})

FENCE = re.compile(r"^ {0,3}(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:.|\n)*?(?<!`)\1(?!`)")
LINK = re.compile(
    r"(?P<bang>!?)\[(?P<label>(?:[^\[\]]|\[[^\[\]]*\])*)\]\((?P<target>[^()\s]+)(?P<title>\s+\"[^\"]*\")?\)"
)


def site_path(repo_path: str) -> str | None:
    """Where the file at ``repo_path`` (relative to the repository root, POSIX) lands on the
    site, relative to the site's root; None when the site does not hold it."""
    parts = repo_path.split("/")
    if repo_path == HOME_PAGE:
        return "index.md"
    if parts[0] == DOCS_FOLDER and len(parts) > 1:
        return "/".join(parts[1:])
    if parts[0] == LABS_FOLDER and repo_path.endswith(".md") and not LABS_CODE_FOLDERS & set(parts[1:-1]):
        return repo_path
    return None


def labs_pages(repo_root: Path) -> list[str]:
    """The labs/ pages the site holds, as repository paths, sorted."""
    found = (p.relative_to(repo_root).as_posix() for p in (repo_root / LABS_FOLDER).rglob("*.md"))
    return sorted(p for p in found if site_path(p) is not None)


@dataclass
class Rewritten:
    """One page's markdown with its links rewritten, and what the rewriting found."""

    markdown: str
    problems: list[str] = field(default_factory=list)  # links to nothing in the repository
    images: list[str] = field(default_factory=list)  # repository paths of images copied into the site


def _code_spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in INLINE_CODE.finditer(text)]


def _prose_and_code(markdown: str) -> list[tuple[bool, str]]:
    """The markdown cut into (is_prose, text) pieces: fenced code blocks are not prose."""
    pieces: list[tuple[bool, str]] = []
    current: list[str] = []
    fence: str | None = None
    for line in markdown.splitlines(keepends=True):
        m = FENCE.match(line)
        if fence is None and m:
            pieces.append((True, "".join(current)))
            current, fence = [line], m.group(1)
        elif fence is not None and m and m.group(1) == fence:
            current.append(line)
            pieces.append((False, "".join(current)))
            current, fence = [], None
        else:
            current.append(line)
    pieces.append((fence is None, "".join(current)))
    return [p for p in pieces if p[1]]


def rewrite_links(markdown: str, page_repo_path: str, repo_root: Path) -> Rewritten:
    """``markdown`` of the page at ``page_repo_path`` with its relative links pointing where
    their targets land on the site (see the module's docstring)."""
    page_site = site_path(page_repo_path)
    if page_site is None:
        raise ValueError(f"{page_repo_path} is not a page of the site")
    out = Rewritten(markdown="")

    def relative(site_target: str) -> str:
        return posixpath.relpath(site_target, posixpath.dirname(page_site) or ".")

    def replace(m: re.Match[str]) -> str:
        target = m.group("target")
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith(("#", "/")):
            return m.group(0)  # a URL, an anchor on this page, or an absolute path: mkdocs' own checks
        path, sep, fragment = target.partition("#")
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(page_repo_path), path))
        on_disk = repo_root / resolved
        if resolved.startswith("../") or resolved == ".." or not on_disk.exists():
            out.problems.append(f"{page_repo_path}: link to '{target}', which is not in the repository")
            return m.group(0)
        if on_disk.is_dir() and site_path(f"{resolved}/README.md") and (on_disk / "README.md").is_file():
            resolved = f"{resolved}/README.md"
        site_target = site_path(resolved)
        if site_target is not None:
            new_target = relative(site_target) + sep + fragment
        elif m.group("bang") and on_disk.suffix.lower() in IMAGE_SUFFIXES:
            if resolved not in out.images:
                out.images.append(resolved)
            new_target = relative(f"{COPIED_ASSETS}/{resolved}")
        else:
            label = m.group("label")
            return label if resolved in label else f"{label} (`{resolved}`)"
        return f"{m.group('bang')}[{m.group('label')}]({new_target}{m.group('title') or ''})"

    pieces = []
    for is_prose, text in _prose_and_code(markdown):
        if not is_prose:
            pieces.append(text)
            continue
        spans = _code_spans(text)
        pos, rewritten = 0, []
        for m in LINK.finditer(text):
            if any(start <= m.start() < end for start, end in spans):
                continue
            rewritten += [text[pos : m.start()], replace(m)]
            pos = m.end()
        pieces.append("".join(rewritten) + text[pos:])
    out.markdown = "".join(pieces)
    return out


def _repo_root(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).resolve().parent


def _repo_path(file: File) -> str:
    """The repository path of one of the site's pages."""
    if file.src_uri == "index.md":
        return HOME_PAGE
    if file.src_uri.startswith(f"{LABS_FOLDER}/"):
        return file.src_uri
    return f"{DOCS_FOLDER}/{file.src_uri}"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Adds the README and the labs' pages, then the images outside docs/ that pages show."""
    root = _repo_root(config)
    for repo_path in [HOME_PAGE, *labs_pages(root)]:
        files.append(File.generated(config, site_path(repo_path), abs_src_path=str(root / repo_path)))
    copied: set[str] = set()
    for file in list(files.documentation_pages()):
        for image in rewrite_links(file.content_string, _repo_path(file), root).images:
            if image not in copied:
                copied.add(image)
                files.append(File.generated(config, f"{COPIED_ASSETS}/{image}", abs_src_path=str(root / image)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """The page's links rewritten for the site; a link to nothing is a warning."""
    result = rewrite_links(markdown, _repo_path(page.file), _repo_root(config))
    for problem in result.problems:
        log.warning(problem)
    return result.markdown
