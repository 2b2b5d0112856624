"""The documentation's links resolve: every relative link in README.md and docs/ names a file that
exists and, after a `#`, a heading of it; every docs/ page the code or configuration names exists."""

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)[ \t#]*$", re.M)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # https:, mailto:, …
SKIPPED = {"node_modules", "instance", "__pycache__"}  # and hidden folders: .git, .venv, …


def prose(text):
    """`text` without its fenced code blocks, where `#` starts a comment, not a heading."""
    return FENCE.sub("", text)


def links(text):
    body = CODE.sub("", prose(text))
    return INLINE.findall(body) + REFERENCE.findall(body)


def slug(heading):
    """GitHub's anchor for a heading: its text lowercased, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path):
    """The anchors of a Markdown file's headings; a repeated heading gets -1, -2, … as on GitHub."""
    seen, found = {}, set()
    for heading in HEADING.findall(prose(path.read_text())):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links():
    for page in PAGES:
        for target in sorted(set(links(page.read_text()))):
            if not EXTERNAL.match(target):
                yield pytest.param(page, target, id=f"{page.relative_to(ROOT)}:{target}")


@pytest.mark.parametrize(("page", "target"), list(relative_links()))
def test_a_relative_link_resolves(page, target):
    path, _, anchor = target.partition("#")
    file = (page.parent / path).resolve() if path else page
    assert file.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"
    if anchor and file.suffix == ".md":
        assert anchor in anchors(file), f"{page.relative_to(ROOT)} links to {target}: no such heading"


def test_the_readme_links_every_docs_page():
    """Also guards the test above: it finds the README's links."""
    targets = {target.partition("#")[0] for target in links((ROOT / "README.md").read_text())}
    assert {f"docs/{page.name}" for page in PAGES[1:]} <= targets


def project_files(suffixes):
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [name for name in subfolders if name not in SKIPPED and not name.startswith(".")]
        for name in files:
            if name.endswith(suffixes):
                yield Path(folder, name)


def test_the_docs_pages_the_code_names_exist():
    named = {
        (path.relative_to(ROOT), name)
        for path in project_files((".py", ".toml", ".md"))
        for name in re.findall(r"\bdocs/([\w.-]+\.md)\b", path.read_text(errors="replace"))
    }
    assert named
    missing = [
        f"{source} names docs/{name}" for source, name in sorted(named) if not (ROOT / "docs" / name).exists()
    ]
    assert not missing, missing


# --- the reference pages list everything the code has


def test_the_configuration_page_lists_every_variable():
    import variables

    page = (ROOT / "docs" / "configuration.md").read_text()
    names = "|".join(name.upper() for name in variables.PROVIDERS)
    provider = re.compile(rf"EXTERNAL_(?:{names})_(\w+)")
    missing = []
    for name in variables.VARIABLES:
        found = provider.fullmatch(name)
        # The providers' variables are listed once, as EXTERNAL_P_<PART>.
        listed = f"`EXTERNAL_P_{found[1]}`" if found else f"`{name}`"
        if listed not in page:
            missing.append(name)
    assert not missing, f"docs/configuration.md does not list {missing}"
    assert all(f"`{name.upper()}`" in page for name in variables.PROVIDERS)


def test_the_errors_page_lists_every_code():
    import errors

    page = (ROOT / "docs" / "errors.md").read_text()
    classes = [errors.Auth, errors.Rest, errors.Storage]
    codes = [value for kind in classes for name, value in vars(kind).items() if name.isupper()]
    assert len(codes) > 80
    missing = [code for code in codes if f"`{code}`" not in page]
    assert not missing, f"docs/errors.md does not list {missing}"


def test_the_email_page_lists_every_template_and_its_variables():
    from auth import emails

    page = (ROOT / "docs" / "email.md").read_text()
    templates = set(emails.TEMPLATES.values())
    shipped = {path.stem for path in (ROOT / "templates" / "email").iterdir()}
    assert templates == shipped
    assert all(f"`{name}`" in page for name in templates)
    used = set()
    for path in (ROOT / "templates" / "email").iterdir():
        used |= set(re.findall(r"{{\s*(\w+)", path.read_text()))
    for name in used | {"confirmation_url", "token", "token_hash", "redirect_to"}:
        assert f"`{name}`" in page, name


def test_the_docs_describe_the_migration_lock_the_code_takes():
    """No page says a `GET_LOCK` guards the migration (it holds on one Galera node only); the ones
    that describe the lock name its table and its lease as database/migration_lock.py has them."""
    code = (ROOT / "database" / "migration_lock.py").read_text()
    table = re.search(r'^LOCK_TABLE = "(\w+)"', code, re.M).group(1)
    lease = re.search(r"^LEASE_SECONDS = (\d+)", code, re.M).group(1)
    for page in PAGES:
        for paragraph in re.split(r"\n\s*\n", prose(page.read_text())):
            if "GET_LOCK" in paragraph:
                assert "migrat" not in paragraph.lower(), (page.name, paragraph)
    for name in ("README.md", "docs/deployment.md"):
        text = " ".join((ROOT / name).read_text().split())
        assert f"`{table}`" in text and f"{lease} s" in text, name
