from runner.nvrtc_log import map_records, parse_log

LOG = """\
mha_fwd.tl(23): error: identifier "acc_s" is undefined
      acc_s(i) = 0;
      ^

/x/include/cute/config.hpp(118): catastrophic error: cannot open source file "cuda/std/cassert"
  #  include <cuda/std/cassert>
                               ^

mha_fwd.cu(40): warning #177-D: variable "x" was declared but never referenced
            detected during instantiation of "void f<T>() [with T=int]" at line 12

3 errors detected in the compilation of "mha_fwd.cu".
Compilation terminated.
"""


def test_parse_records_with_context():
    recs = parse_log(LOG)
    assert [(r.file, r.line, r.severity) for r in recs] == [
        ("mha_fwd.tl", 23, "error"),
        ("/x/include/cute/config.hpp", 118, "error"),
        ("mha_fwd.cu", 40, "warning"),
    ]
    assert recs[0].is_tl and recs[0].message == 'identifier "acc_s" is undefined'
    assert recs[0].context == ("      acc_s(i) = 0;", "      ^")
    assert recs[2].number == "177-D"
    assert "detected during instantiation" in recs[2].context[0]
    assert all("Compilation terminated" not in c for r in recs for c in r.context)


def test_map_records_through_source_map():
    recs = map_records(parse_log(LOG), "mha_fwd.cu", {40: 7}, "mha_fwd.tl")
    assert (recs[2].file, recs[2].line) == ("mha_fwd.tl", 7)
    assert recs[1].file.endswith("config.hpp")  # headers stay where they are


def test_empty_log():
    assert parse_log("") == []
