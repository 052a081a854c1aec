"""`Measurements.from_csv` on unusual and broken files (issue 17): a UTF-8 byte-order mark
and blank lines are accepted; every parse error is a `ValueError` that names the line, the
column and the offending text."""

import numpy as np
import pytest

from jcalib.data import Measurements

GOOD = "t,A,B\n0,1,2\n1,0.5,\n2,0.25,1\n"


def _write(tmp_path, content, name="data.csv"):
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8", newline="")
    else:
        path.write_bytes(content)
    return path


@pytest.mark.parametrize("content", [
    pytest.param(GOOD, id="plain"),
    pytest.param("\ufeff" + GOOD, id="utf8-bom"),
    pytest.param(GOOD.replace("\n", "\r\n"), id="crlf"),
    pytest.param("\ufeff" + GOOD.replace("\n", "\r\n"), id="bom-crlf-spreadsheet"),
    pytest.param("t, A , B\n\n0, 1, 2\n1,0.5,  \n\n2,0.25,1\n\n", id="spaces-and-blank-lines"),
    pytest.param("\"t\",\"A\",\"B\"\n\"0\",\"1\",\"2\"\n1,0.5,\n2,0.25,1\n", id="quoted"),
])
def test_accepted_layouts_give_the_same_measurements(tmp_path, content):
    m = Measurements.from_csv(_write(tmp_path, content))
    assert m.output_names == ("A", "B")
    np.testing.assert_array_equal(np.asarray(m.ts), [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(np.asarray(m.mask), [[True, True], [True, False], [True, True]])
    np.testing.assert_array_equal(np.asarray(m.values)[np.asarray(m.mask)], [1.0, 2.0, 0.5, 0.25, 1.0])


def test_sigma_cell_may_be_empty_where_the_value_is(tmp_path):
    m = Measurements.from_csv(_write(tmp_path, "t,A,B,sigma_A,sigma_B\n0,1,2,0.1,0.2\n1,0.5,,0.1,\n"))
    np.testing.assert_array_equal(np.asarray(m.mask), [[True, True], [True, False]])
    sigma = np.asarray(m.sigma_full())
    assert sigma[0, 0] == sigma[1, 0] == 0.1 and sigma[0, 1] == 0.2


@pytest.mark.parametrize("content, message", [
    # empty files and headers
    ("", "is empty"),
    ("\n\n  \n", "is empty"),
    ("\ufeff", "is empty"),
    ("time,A\n0,1\n", r"the first column must be 't'; got header \['time', 'A'\] \(line 1"),
    ("t\n0\n", "no output columns"),
    ("t,A\n", "has a header but no rows"),
    ("t,A,,B\n0,1,2,3\n", "column 3 of the header .* has no name"),
    ("t,A,B,sigma_A\n0,1,2,0.1\n", "sigma columns but not one per output"),
    ("t,A,A\n0,1,2\n", "duplicate output_names"),
    # rows: every message names the line, the column and the text
    ("t,A,B\n0,1,2\n1,2\n", "line 3 of .* has 2 cells; expected 3"),
    ("t,A,B\n0,1,2\n1,abc,3\n", r"line 3, column 2 \('A'\) of .*: 'abc' is not a finite number; leave the cell "
                                "empty for a missing entry"),
    ("t,A,B\n0,1,2\n\n1,2,1,5e\n", "line 4 of .* has 4 cells"),
    ("t,A,B\n0,1,2\n\n1,2,1.5e\n", r"line 4, column 3 \('B'\) of .*: '1.5e' is not a finite number"),
    ("t,A,B\n0,1,2\n1,nan,3\n", r"line 3, column 2 \('A'\) .*'nan' is not a finite number"),
    ("t,A,B\n0,1,inf\n", r"line 2, column 3 \('B'\) .*'inf' is not a finite number"),
    ("t,A,B\n0,1,1e999\n", r"line 2, column 3 \('B'\) .*'1e999' is not a finite number"),
    ("t,A,B\nx,1,2\n", r"line 2, column 1 \('t'\) .*'x' is not a finite number"),
    ("t,A,B\n,1,2\n", r"line 2, column 1 \('t'\) .*'' is not a finite number"),
    ("t,A,B\n0,1,2\nnan,1,2\n", r"line 3, column 1 \('t'\) .*'nan' is not a finite number"),
    ("t,A,B\n5,1,2\n1,1,2\n", r"line 3, column 1 \('t'\) .*time '1' is before 5.0 on line 2; sort the rows"),
    ("t,A,B,sigma_A,sigma_B\n0,1,2,0.1,x\n", r"line 2, column 5 \('sigma_B'\) .*'x' is not a positive finite"),
    ("t,A,B,sigma_A,sigma_B\n0,1,2,0.1,-1\n", r"line 2, column 5 \('sigma_B'\) .*'-1' is not a positive finite"),
    ("t,A,B,sigma_A,sigma_B\n0,1,2,0,0.1\n", r"line 2, column 4 \('sigma_A'\) .*'0' is not a positive finite"),
    ("t,A,B,sigma_A,sigma_B\n0,1,2,,0.1\n", r"line 2, column 4 \('sigma_A'\) .*'' is not a positive finite"),
    ("t,A,B\n0,,\n", "no measured entries"),
    pytest.param('t,A\n0,"' + "1" * 200_000 + '"\n', r"line 2 of .* is not valid CSV \(field larger than field limit",
                 id="field-too-large"),
    ("t,A\n0,1\x00\n", r"line 2, column 2 \('A'\) .*'1\\x00' is not a finite number"),
])
def test_bad_csv_is_refused_with_line_and_column(tmp_path, content, message):
    with pytest.raises(ValueError, match=message):
        Measurements.from_csv(_write(tmp_path, content))


@pytest.mark.parametrize("content, message", [
    (b"t,A\n0,\xff\n", r"is not UTF-8 text \(byte b'\\xff' at offset 6\); save the file as UTF-8"),
    ("t,A\n0,1\n".encode("utf-16"), "is not UTF-8 text"),
])
def test_non_utf8_bytes_are_refused(tmp_path, content, message):
    with pytest.raises(ValueError, match=message):
        Measurements.from_csv(_write(tmp_path, content))


def test_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        Measurements.from_csv(tmp_path / "nope.csv")
