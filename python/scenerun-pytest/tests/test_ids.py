"""The plugin takes device ids as scenerun wrote them, and refuses anything else."""

import pytest

from scenerun_pytest.plugin import granted_ids


def test_the_list_scenerun_writes_is_taken_as_it_is():
    assert granted_ids("0", "SCENERUN_DEVICES") == [0]
    assert granted_ids("3,1,12", "SCENERUN_DEVICES") == [3, 1, 12]


@pytest.mark.parametrize("text", ["", "0,0", "3-1", "0-3", "a", "1, 2", "-1", "٣"])
def test_anything_else_is_a_usage_error_naming_its_source(text):
    with pytest.raises(pytest.UsageError, match="SCENERUN_DEVICES"):
        granted_ids(text, "SCENERUN_DEVICES")
