"""`Registry`: a fresh ``Registry("test")`` per test; the global registries are never touched."""

import collections

import pytest

from dataflex_rl.core.registry import ConfigError, Registry, UnknownNameError, import_object


class Base:
    pass


class Child(Base):
    pass


class Other:
    pass


def test_register_as_decorator_and_directly():
    reg = Registry("test")

    @reg.register("child")
    class Local(Base):
        pass

    reg.register("other", Other)
    assert reg.get("child") is Local and reg.get("other") is Other
    assert reg.names() == ["child", "other"] and list(reg) == ["child", "other"]
    assert "child" in reg and "nope" not in reg and len(reg) == 2


def test_duplicate_name_raises():
    reg = Registry("test")
    reg.register("a", Child)
    with pytest.raises(ValueError, match="'a' is already registered"):
        reg.register("a", Other)
    with pytest.raises(ValueError, match="already registered"):
        reg.register("a")(Other)
    assert reg.get("a") is Child  # the first registration stands


def test_base_class_is_checked():
    reg = Registry("test", base=Base)
    reg.register("child", Child)
    with pytest.raises(TypeError, match="must be a subclass of Base"):
        reg.register("other", Other)
    with pytest.raises(TypeError, match="subclass"):
        reg.register("instance", Child())
    assert "other" not in reg


def test_unknown_name_lists_valid_names_and_suggests():
    reg = Registry("widget")
    for name in ("band", "max_variance", "top_fraction"):
        reg.register(name, Other)
    with pytest.raises(UnknownNameError) as e:
        reg.get("max_varience")
    msg = str(e.value)
    assert "unknown widget 'max_varience'" in msg
    assert "Did you mean 'max_variance'?" in msg
    assert "band, max_variance, top_fraction" in msg
    # it is a ConfigError and a KeyError, and str() is not quoted like a KeyError's
    assert isinstance(e.value, ConfigError) and isinstance(e.value, KeyError)
    assert not msg.startswith("'")


def test_unknown_name_without_close_match_has_no_suggestion():
    reg = Registry("widget")
    reg.register("band", Other)
    with pytest.raises(UnknownNameError) as e:
        reg.get("zzzzzz")
    assert "Did you mean" not in str(e.value) and "band" in str(e.value)


def test_lazy_entry_resolved_on_first_get_and_base_checked_then():
    reg = Registry("test", base=dict)
    reg.register("ordered", "collections:OrderedDict")
    reg.register("bad", "collections:deque")  # not a dict: found out on get
    assert reg.get("ordered") is collections.OrderedDict
    with pytest.raises(TypeError, match="subclass of dict"):
        reg.get("bad")


def test_lazy_entry_with_missing_module_or_attr():
    reg = Registry("test")
    reg.register("nomod", "no_such_module_xyz:Thing")
    reg.register("noattr", "collections:NoSuchThing")
    with pytest.raises(ConfigError, match="cannot import module 'no_such_module_xyz'"):
        reg.get("nomod")
    with pytest.raises(ConfigError, match="has no attribute 'NoSuchThing'"):
        reg.get("noattr")


def test_user_component_as_module_attr():
    reg = Registry("test", base=Base)
    # a class in the user's own module (here: this test module), not registered
    assert reg.get(f"{__name__}:Child") is Child
    assert "tests" not in reg.names()  # get does not register it
    with pytest.raises(TypeError, match="subclass of Base"):
        reg.get(f"{__name__}:Other")
    with pytest.raises(ConfigError, match="cannot import"):
        reg.get("no_such_module_xyz:Child")


def test_import_object_dotted_attr_and_bad_form():
    assert import_object("collections:OrderedDict.fromkeys") == collections.OrderedDict.fromkeys
    with pytest.raises(ConfigError, match="not of the form 'module:attr'"):
        import_object("collections:", "here")
    with pytest.raises(ConfigError, match="^here: "):
        import_object(":x", "here")


def test_name_must_be_a_string():
    with pytest.raises(ConfigError, match="must be a string"):
        Registry("test").get(3)
