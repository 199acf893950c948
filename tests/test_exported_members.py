"""The public surface: every name in `pipeline.__all__` imports and is what it says."""

import pipeline


def test_all_exports_resolve():
    for name in pipeline.__all__:
        member = getattr(pipeline, name)
        assert member.__name__ == name


def test_unknown_names_are_an_attribute_error():
    import pytest

    with pytest.raises(AttributeError):
        _ = pipeline.NoSuchThing
