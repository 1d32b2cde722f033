"""Parser: every statement form, error recovery, unterminated loops, exact UTF-16 ranges."""

from __future__ import annotations

from tl_language import Position, Range, parse
from tl_language import syntax as ast


def one(text: str) -> ast.Stmt:
    doc, diags = parse(text)
    assert diags == []
    assert len(doc.statements) == 1
    return doc.statements[0]


def test_header_statements() -> None:
    assert isinstance(k := one("Kernel flash"), ast.KernelStmt) and k.name and k.name.name == "flash"
    assert isinstance(t := one("TARGET sm_90"), ast.TargetStmt) and t.arch and t.arch.name == "sm_90"
    assert isinstance(d := one("dtype bf16"), ast.DtypeStmt) and d.dtype and d.dtype.name == "bf16"
    m = one("Mask window(128, 0)")
    assert isinstance(m, ast.MaskStmt) and m.kind and m.kind.name == "window" and len(m.args) == 2


def test_param_with_expression_and_hole() -> None:
    p = one("Param BN = (BM + 32) * 2 / 4")
    assert isinstance(p, ast.ParamStmt) and ast.expr_text(p.value) == "(BM + 32) * 2 / 4"
    h = one("Param BM = ?")
    assert isinstance(h, ast.ParamStmt) and isinstance(h.value, ast.Hole)


def test_allocate_with_and_without_offset() -> None:
    a = one("Allocate Q in global (seqlen_q, d) with offset q_offset")
    assert isinstance(a, ast.AllocateStmt) and a.level and a.level.name == "global"
    assert [ast.expr_text(e) for e in a.shape or []] == ["seqlen_q", "d"]
    assert ast.expr_text(a.offset) == "q_offset"
    b = one("allocate S in register (BM, BN)")
    assert isinstance(b, ast.AllocateStmt) and b.offset is None


def test_copy_forms() -> None:
    c = one("Copy K (BN, d) in coordinate [L = j] from global to shared")
    assert isinstance(c, ast.CopyStmt) and c.tile is not None and c.coordinate is not None
    assert c.coordinate.axis.name == "L" and ast.expr_text(c.coordinate.value) == "j"
    assert c.src and c.src.name == "global" and c.dst and c.dst.name == "shared" and c.alias is None
    s = one("Copy K from shared to register")
    assert isinstance(s, ast.CopyStmt) and s.tile is None and s.coordinate is None
    o = one("Copy acc_o (BM, d) in coordinate [L = block_m] from register to global as O")
    assert isinstance(o, ast.CopyStmt) and o.alias and o.alias.name == "O"


def test_compute_modes() -> None:
    modes = {
        "Compute GEMM Q, K and get S": "get",
        "Compute Multiply S, scale and get new S": "get_new",
        "Compute GEMM S, V and accumulate acc_o": "accumulate",
        "Compute Softmax S": "inplace",
    }
    for text, mode in modes.items():
        c = one(text)
        assert isinstance(c, ast.ComputeStmt) and c.mode == mode, text
    c = one("Compute GEMM Q, K and get S")
    assert isinstance(c, ast.ComputeStmt) and c.op and c.op.name == "GEMM" and len(c.args) == 2


def test_reshape_and_for() -> None:
    r = one("Reshape S from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_N_new)")
    assert isinstance(r, ast.ReshapeStmt) and r.dst_layout is not None and r.dst_layout[0].name == "MMA_A"
    doc, diags = parse("for j = 0: seqlen_k / BN\n    Compute Softmax S\nend\n")
    assert diags == []
    loop = doc.statements[0]
    assert isinstance(loop, ast.ForStmt) and len(loop.body) == 1 and loop.end_range is not None
    assert ast.expr_text(loop.stop) == "seqlen_k / BN"


def test_nested_loops_and_walk_order() -> None:
    doc, diags = parse("for i = 0: 2\nfor j = 0: 2\nCompute Softmax S\nend\nend")
    assert diags == []
    kinds = [type(s).__name__ for s in doc.walk()]
    assert kinds == ["ForStmt", "ForStmt", "ComputeStmt"]


def test_one_broken_line_is_one_diagnostic_and_the_rest_parses() -> None:
    text = "Target sm_80\nCopy Q from global to\nParam BM = 64\nAllocate Q in shraed (BM)\n"
    doc, diags = parse(text)
    assert [d.range.start.line for d in diags] == [1]
    kinds = [type(s).__name__ for s in doc.statements]
    assert kinds == ["TargetStmt", "CopyStmt", "ParamStmt", "AllocateStmt"]
    broken = doc.statements[1]
    assert isinstance(broken, ast.CopyStmt) and broken.src and broken.dst is None  # partial node kept


def test_unterminated_for_is_reported_at_the_for() -> None:
    doc, diags = parse("Param n = 2\nfor i = 0: n\n    Compute Softmax S\n")
    assert [(d.code, d.range.start.line) for d in diags] == [("TL004", 1)]
    loop = doc.statements[1]
    assert isinstance(loop, ast.ForStmt) and loop.end_range is None and len(loop.body) == 1


def test_unknown_statement_and_bad_character() -> None:
    _, diags = parse("Cpy Q from global to shared\nParam x = 1 @\n")
    assert [d.code for d in diags] == ["TL002", "TL001"]
    assert "did you mean `Copy`" in diags[0].message


def test_utf16_columns_after_astral_characters_in_a_comment() -> None:
    # 𝔸 is one code point but two UTF-16 code units; the comment precedes nothing on its line, so test
    # a bad astral character before a token on the same line and a comment line above.
    doc, diags = parse("# 𝔸𝔸\nParam 𝔸 = 1\n")
    assert len(diags) == 1 and diags[0].code in ("TL001", "TL003")
    assert diags[0].range == Range(Position(1, 6), Position(1, 8))  # the astral char spans 2 units
    doc, diags = parse("Param x = 1  # 𝔸 before\nParam y = 2")
    assert diags == [] and doc.comments[0].range == Range(Position(0, 13), Position(0, 24))


def test_utf16_token_after_bmp_and_astral_characters() -> None:
    doc, diags = parse("Param é𝔸 = 1")
    assert diags and diags[0].range.start.character == 6
    doc, _ = parse("Kernel k # é𝔸\nParam z = 3")
    p = doc.statements[1]
    assert isinstance(p, ast.ParamStmt) and p.name and p.name.range == Range(Position(1, 6), Position(1, 7))


def test_crlf_and_empty_text() -> None:
    doc, diags = parse("Param a = 1\r\nParam b = 2\r\n")
    assert diags == [] and len(doc.statements) == 2 and doc.line_count == 3
    doc, diags = parse("")
    assert diags == [] and doc.statements == [] and doc.line_count == 1


def test_sketch_parses_without_errors() -> None:
    _, diags = parse("Param BM = ?\nCopy Q in coordinate [L = block_m] from global to shared\n")
    assert diags == []
