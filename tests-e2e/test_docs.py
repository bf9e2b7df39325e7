"""The documentation works as written.

1. Every ```python block of every Markdown file under `docs/` (and of `README.md`) runs.
   The blocks of one file run in order in one shared namespace, in a fresh temporary
   working directory (`tempfile.mkdtemp()` lands there too). A block is skipped when its
   info string holds the word `no-run` (```python no-run), or when the line just before its
   opening fence is the comment `<!-- docs: no-run -->`. The site's Markdown
   (pymdownx.superfences) does not render `python no-run` fences, so pages under `docs/`
   use the comment.
2. The docstring examples (doctests) of the public API of `ferroload_store`,
   `ferroload_format` and `ferroload` pass. Each package runs in its own interpreter:
   examples use `memory://` stores, which live as long as the process.
3. The site builds with `mkdocs build --strict` (slow).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
NO_RUN_WORD = "no-run"
NO_RUN_COMMENT = "<!-- docs: no-run -->"

_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")


@dataclass(frozen=True)
class CodeBlock:
    """One fenced code block of a Markdown file."""

    path: Path
    line: int
    """1-based line number of the first line of code (the one after the opening fence)."""
    lang: str
    info: str
    code: str
    marked_no_run: bool

    @property
    def runs(self) -> bool:
        return (
            self.lang in ("python", "py")
            and NO_RUN_WORD not in self.info.split()
            and not self.marked_no_run
        )

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def code_blocks(path: Path) -> list[CodeBlock]:
    """Every fenced code block of `path`, in order (indented fences are dedented)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if m is None:
            i += 1
            continue
        fence, indent, info = m["fence"], m["indent"], m["info"].strip()
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        j = i + 1
        while j < len(lines) and not closing.match(lines[j]):
            j += 1
        body = [ln[len(indent) :] if ln.startswith(indent) else ln for ln in lines[i + 1 : j]]
        lang = info.strip("{}").split()[0].lstrip(".").lower() if info else ""
        previous = lines[i - 1].strip() if i > 0 else ""
        blocks.append(
            CodeBlock(
                path=path,
                line=i + 2,
                lang=lang,
                info=info,
                code=textwrap.dedent("\n".join(body)) + "\n",
                marked_no_run=previous == NO_RUN_COMMENT,
            )
        )
        i = j + 1
    return blocks


def _markdown_files() -> list[Path]:
    files = sorted(DOCS.rglob("*.md"))
    readme = REPO / "README.md"
    if readme.is_file():
        files.append(readme)
    return [f for f in files if any(b.runs for b in code_blocks(f))]


def test_code_block_parser(tmp_path: Path) -> None:
    """The parser finds blocks, their lines and the no-run markers (so skips are deliberate)."""
    md = tmp_path / "page.md"
    md.write_text(
        "# t\n\n```python\nx = 1\n```\n\n```python no-run\nboom()\n```\n\n"
        f"{NO_RUN_COMMENT}\n```python\nboom()\n```\n\n"
        "!!! note\n    ```py\n    if x:\n        y = 2\n    ```\n\n~~~bash\nls\n~~~\n",
        encoding="utf-8",
    )
    blocks = code_blocks(md)
    assert [(b.line, b.lang, b.runs) for b in blocks] == [
        (4, "python", True),
        (8, "python", False),
        (13, "python", False),
        (18, "py", True),
        (23, "bash", False),
    ]
    assert blocks[3].code == "if x:\n    y = 2\n"


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_markdown_python_blocks(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run the file's Python blocks in order, in one namespace, in a fresh directory."""
    blocks = [b for b in code_blocks(path) if b.runs]
    monkeypatch.chdir(tmp_path)
    # tempfile.mkdtemp() in the docs then creates under tmp_path, which pytest cleans up.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    namespace: dict[str, object] = {"__name__": "__docs__"}
    try:
        for block in blocks:
            # Pad with blank lines so tracebacks show the Markdown file's own line numbers.
            source = "\n" * (block.line - 1) + block.code
            try:
                exec(compile(source, str(block.path), "exec"), namespace)
            except Exception:
                failure = traceback.format_exc()
            else:
                continue
            pytest.fail(f"the Python block at {block.where} failed:\n{failure}", pytrace=False)
    finally:
        # a page is a script of its own: a Ray cluster it started (and did not shut down,
        # having failed) must not serve the next page run in this process
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            ray.shutdown()


# --------------------------------------------------------------------------- doctests

#: Public packages whose docstring examples must pass.
DOCTEST_PACKAGES = (
    "ferroload_core",
    "ferroload_store",
    "ferroload_format",
    "ferroload_codec",
    "ferroload_loader",
    "ferroload_loader.torch",
    "ferroload_loader.lightning",
    "ferroload_map",
    "ferroload_convert",
    "ferroload_catalog",
    "ferroload",
    "ferroload.codec",
    "ferroload.loader",
    "ferroload.loader.torch",
    "ferroload.loader.lightning",
)

# Runs in a child interpreter: python -c RUNNER <package>. Collects the examples of the
# package's own docstring and of every public object the package itself defines (a
# re-export from another package is tested there). Examples of one package share its
# memory:// stores; `Writer`'s example writes the dataset that `Dataset`'s examples read,
# so it runs first.
_DOCTEST_RUNNER = """
import doctest, importlib, inspect, sys

RUN_FIRST = {"ferroload_format": ["Writer"]}
name = sys.argv[1]
package = importlib.import_module(name)
finder = doctest.DocTestFinder()
tests = [t for t in finder.find(package, name) if t.examples]
order = RUN_FIRST.get(name, [])
exported = sorted(package.__all__, key=lambda n: (n not in order, order.index(n) if n in order else 0))
for attr in exported:
    obj = getattr(package, attr)
    if not (inspect.isclass(obj) or inspect.isroutine(obj)):
        continue
    home = inspect.getmodule(obj)
    if home is None or not (home.__name__ == name or home.__name__.startswith(name + ".")):
        continue
    tests += [t for t in finder.find(obj, f"{name}.{attr}", module=home) if t.examples]
    # a public class's methods inherited from a base of the package (DatasetBase): the
    # finder reads only the class's own __dict__
    for base in inspect.getmro(obj)[1:] if inspect.isclass(obj) else ():
        where = inspect.getmodule(base)
        if where is not None and where.__name__.startswith(name + "."):
            tests += [t for t in finder.find(base, f"{name}.{attr}", module=where) if t.examples]
tests = list({t.name: t for t in tests}.values())  # a module's own classes come up twice
runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
for test in tests:
    print(f"doctest {test.name} ({len(test.examples)} examples)", flush=True)
    runner.run(test)
result = runner.summarize(verbose=False)
print(f"{name}: {result.attempted} examples, {result.failed} failed")
sys.exit(1 if result.failed or not result.attempted else 0)
"""


@pytest.mark.parametrize("package", DOCTEST_PACKAGES)
def test_docstring_examples(package: str) -> None:
    """Every docstring example of the package's public API runs and prints what it says."""
    proc = subprocess.run(
        [sys.executable, "-c", _DOCTEST_RUNNER, package],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"docstring examples of {package} failed:\n{output}"
    assert " 0 failed" in output


# --------------------------------------------------------------------------- API pages

#: API reference page of each package; `ferroload` (the facade) links to the others.
API_PAGES = {
    "ferroload_core": "core.md",
    "ferroload_store": "store.md",
    "ferroload_format": "format.md",
    "ferroload_codec": "codec.md",
    "ferroload_loader": "loader.md",
    "ferroload_map": "map.md",
    "ferroload_convert": "convert.md",
    "ferroload_cli": "cli.md",
    "ferroload_catalog": "catalog.md",
    "ferroload_testing": "testing.md",
}


@pytest.mark.parametrize("package", sorted(API_PAGES))
def test_api_page_covers_public_names(package: str) -> None:
    """Every name in the package's `__all__` has a `::: package.name` entry on its page."""
    module = __import__(package)
    page = (DOCS / "api" / API_PAGES[package]).read_text(encoding="utf-8")
    directives = set(re.findall(r"^:::\s+(\S+)", page, flags=re.MULTILINE))
    assert package in directives or any(d.startswith(f"{package}.") for d in directives)
    public = [n for n in module.__all__ if n != "__version__"]
    missing = [n for n in public if f"{package}.{n}" not in directives]
    assert not missing, f"docs/api/{API_PAGES[package]} lacks entries for {missing}"


def test_facade_page_lists_every_reexport() -> None:
    """docs/api/ferroload.md links every name `ferroload` re-exports to its home page."""
    import ferroload

    page = (DOCS / "api" / "ferroload.md").read_text(encoding="utf-8")
    missing = []
    for name in ferroload.__all__:
        if name == "__version__":
            continue
        home = getattr(ferroload, name).__module__.split(".")[0]
        if f"[`{name}`][{home}.{name}]" not in page:
            missing.append(f"{home}.{name}")
    assert not missing, f"docs/api/ferroload.md does not link {missing}"


# --------------------------------------------------------------------------- site


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs site, built once by `mkdocs build --strict` (its output checked by
    `test_site_builds_strict`)."""
    out = tmp_path_factory.mktemp("docs") / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(REPO / "mkdocs.yml"),
            "--site-dir",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
        env={**os.environ, "NO_COLOR": "1", "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}{proc.stderr}"
    return out


@pytest.mark.slow
def test_site_builds_strict(site: Path) -> None:
    """`mkdocs build --strict`: no broken link, no unresolved reference, no bad docstring."""
    for page in (
        "index.html",
        "quickstart/index.html",
        "format/index.html",
        "api/format/index.html",
    ):
        assert (site / page).is_file(), f"{page} was not built"
    api = (site / "api" / "format" / "index.html").read_text(encoding="utf-8")
    assert "ferroload_format.Writer" in api, "mkdocstrings did not render the Writer class"


#: A diagram as the built page holds it before the browser draws it (Material replaces
#: it with an empty `div.mermaid` whose closed shadow root holds the SVG once drawn).
_RAW_DIAGRAM = re.compile(r'<pre class="mermaid"><code>')
_DRAWN_DIAGRAM = '<div class="mermaid"></div>'
#: A stylesheet, script, font or image that a page loads from another host.
_REMOTE_RESOURCE = re.compile(r'<(?:link|script|img)\b[^>]*\b(?:href|src)="(?:https?:)?//[^"]+')


@pytest.mark.slow
def test_pages_load_nothing_from_other_hosts(site: Path) -> None:
    """Every page was asking fonts.googleapis.com for its fonts: offline, or behind a
    network that blocks CDNs, each page view waited on it. The site serves everything
    it loads itself (links to other sites are fine: they load nothing)."""
    for page in sorted(site.rglob("*.html")):
        found = _REMOTE_RESOURCE.findall(page.read_text(encoding="utf-8"))
        assert not found, f"{page.relative_to(site)} loads {found[:3]}"


@pytest.mark.slow
def test_diagrams_render_offline_in_a_browser(site: Path) -> None:
    """Every page's mermaid diagrams are drawn by headless Chromium with every network
    name unresolvable: the renderer comes from the site itself, not from a CDN."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip(
            "service not available: chromium is not on PATH: install it with "
            "`apt-get install chromium` (.ci/run does)"
        )
    pages = {
        p: len(_RAW_DIAGRAM.findall(p.read_text(encoding="utf-8")))
        for p in sorted(site.rglob("*.html"))
    }
    pages = {p: n for p, n in pages.items() if n}
    assert len(pages) >= 8, f"expected the site's diagrams, found pages {sorted(pages)}"
    for page, diagrams in pages.items():
        proc = subprocess.run(
            [
                browser, "--headless", "--no-sandbox", "--disable-gpu",
                "--host-resolver-rules=MAP * ~NOTFOUND",  # offline: no name resolves
                "--virtual-time-budget=15000", "--dump-dom", page.as_uri(),
            ],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        dom = proc.stdout
        shown = page.relative_to(site)
        assert not _RAW_DIAGRAM.search(dom), f"{shown}: a diagram was left as text"
        assert dom.count(_DRAWN_DIAGRAM) == diagrams, f"{shown}: not every diagram was drawn"
