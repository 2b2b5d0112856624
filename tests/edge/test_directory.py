"""runner/directory.py: which module a function's name is, by the module's real path."""

from runner import directory


def test_a_module_is_found_by_its_real_path_inside_the_directory_only(tmp_path):
    """A function's module is NAME.py or NAME/__init__.py whose real path is inside FUNCTIONS_DIR:
    a link out of it is no function, a link within it is; the directory itself may be a link (a
    release switched by a symlink), and is followed on every look-up."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("def handler(request, caller):\n    return 'out'\n")
    release = tmp_path / "release-1"
    (release / "pkg").mkdir(parents=True)
    (release / "hello.py").write_text("def handler(request, caller):\n    return 'hi'\n")
    (release / "pkg" / "__init__.py").write_text("def handler(request, caller):\n    return 'pkg'\n")
    (release / "evil.py").symlink_to(outside / "secret.py")
    (release / "alias.py").symlink_to(release / "hello.py")
    (release / "folder.py").mkdir()
    (release / "loop.py").symlink_to(release / "loop.py")
    (tmp_path / "release-1-and-more").mkdir()
    (tmp_path / "release-1-and-more" / "next.py").write_text("")
    (release / "next.py").symlink_to(tmp_path / "release-1-and-more" / "next.py")  # shares a prefix
    current = tmp_path / "current"
    current.symlink_to(release)

    found = {name: directory.module_path(current, name)
             for name in ("hello", "pkg", "evil", "alias", "folder", "loop", "next", "nothing")}  # fmt: skip
    assert found == {
        "hello": release / "hello.py",
        "pkg": release / "pkg" / "__init__.py",
        "evil": None,
        "alias": release / "hello.py",
        "folder": None,
        "loop": None,
        "next": None,
        "nothing": None,
    }
    release_2 = tmp_path / "release-2"
    release_2.mkdir()
    (release_2 / "hello.py").write_text("")
    current.unlink()
    current.symlink_to(release_2)
    assert directory.module_path(current, "hello") == release_2 / "hello.py"
    assert directory.module_path(current, "pkg") is None
