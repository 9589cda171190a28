"""The Python API's deployment configs (geotrain.deployment.config_for_model, over
geotrain._core.with_model_tensors): run.wan_profile is found as `geotrain run` finds it
(core/wan_profile.hpp) and written as an absolute file, so the config works wherever it is
written; a profile that does not exist is refused at once, by name."""

import os
import unittest

import _support

geotrain = _support.import_geotrain()
from geotrain import _core  # noqa: E402

SOURCE = _support.source_dir()
BASE = """regions: [a]
model: {kind: mlp}
run:
  wan_profile: %s
"""


def resolved(value, config_dir=""):
    text = _core.with_model_tensors(BASE % value, [("w", 4)], None, config_dir)
    for line in text.splitlines():
        if line.strip().startswith("wan_profile:"):
            return line.split(":", 1)[1].strip().strip('"')
    raise AssertionError("no run.wan_profile in\n" + text)


class WanProfile(unittest.TestCase):
    def test_a_name_is_the_projects_profile_as_an_absolute_file(self):
        expected = os.path.realpath(os.path.join(SOURCE, "configs", "wan", "global-3.yaml"))
        self.assertEqual(os.path.realpath(resolved("global-3")), expected)
        self.assertTrue(os.path.isabs(resolved("global-3")))

    def test_a_path_relative_to_the_config_folder_is_made_absolute(self):
        config_dir = os.path.join(SOURCE, "configs")
        self.assertEqual(os.path.realpath(resolved("wan/lan.yaml", config_dir)),
                         os.path.realpath(os.path.join(config_dir, "wan", "lan.yaml")))

    def test_a_profile_that_does_not_exist_is_refused_by_name(self):
        with self.assertRaisesRegex(Exception, "no such WAN profile.*global-3"):
            resolved("global-33")


if __name__ == "__main__":
    unittest.main()
