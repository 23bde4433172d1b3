"""A workload file inside the user's package: the import error says how to make its siblings importable."""

from __future__ import annotations

import pytest

from dlperf.errors import WorkloadError
from dlperf.workload.loader import load_workload

pytestmark = pytest.mark.unit

NET = "import torch\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
FUNCTIONS = ("\n\ndef model():\n    return Net()\n\n\n"
             "def inputs(batch_size):\n    return (torch.zeros(batch_size, 2),)\n")


@pytest.fixture()
def package(tmp_path):
    (tmp_path / "myproj").mkdir()
    (tmp_path / "myproj" / "__init__.py").write_text("")
    (tmp_path / "myproj" / "net.py").write_text(NET)
    return tmp_path


def test_a_relative_import_says_the_file_is_imported_as_top_level(package):
    path = package / "myproj" / "rel_wl.py"
    path.write_text("import torch\nfrom .net import Net" + FUNCTIONS)
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path))
    message = str(info.value)
    assert "attempted relative import with no known parent package: dlperf imports the file as a top-level " in message
    assert f"import the module beside it by its name ('{package / 'myproj'}' is on the path)" in message


def test_an_absolute_import_of_the_files_own_package_names_the_folder_to_put_on_the_path(package):
    """`from myproj.net import Net` works under `python -m myproj.abs_wl` from the project root, but a console script
    does not put the working directory on the path: "No module named 'myproj'" was all the user read."""
    path = package / "myproj" / "abs_wl.py"
    path.write_text("import torch\nfrom myproj.net import Net" + FUNCTIONS)
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path))
    assert (f"No module named 'myproj': 'myproj' is a folder in '{package}', which is not on the import path (a "
            f"console script does not add the working directory): run with PYTHONPATH={package}") in str(info.value)


def test_a_module_that_is_simply_not_installed_gets_no_hint(tmp_path):
    path = tmp_path / "wl.py"
    path.write_text("import surely_not_installed_anywhere\n")
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path))
    assert "No module named 'surely_not_installed_anywhere'\n" in str(info.value)
