from runner.flops import attention_flops, tflops, visible_pairs


def test_fa_convention_non_causal():
    # 4·B·H·Sq·Sk·d
    assert attention_flops(2, 16, 1024, 1024, 128) == 4 * 2 * 16 * 1024 * 1024 * 128


def test_causal_square_is_exactly_half():
    assert attention_flops(1, 1, 1000, 1000, 64, mask="causal") == 4 * 1000 * 1000 * 64 / 2
    assert attention_flops(1, 1, 17, 17, 64, mask="causal") == 4 * 17 * 17 * 64 / 2


def test_mla_counts_both_head_dims():
    assert attention_flops(1, 2, 8, 8, 192, 128) == 2 * 1 * 2 * 8 * 8 * (192 + 128)


def test_visible_pairs_bottom_right_and_window():
    # sq=2, sk=4 causal: row 0 sees 3 keys, row 1 sees 4.
    assert visible_pairs(2, 4, "causal") == 7
    # sq=4, sk=2 causal: rows 0,1 see nothing, row 2 sees 1, row 3 sees 2.
    assert visible_pairs(4, 2, "causal") == 3
    assert attention_flops(1, 1, 4, 2, 8, mask="causal") == 4 * 8 * 3
    # window (1, 0) on 4×4: 1 + 2 + 2 + 2
    assert visible_pairs(4, 4, "window", (1, 0)) == 7
    assert visible_pairs(3, 5, "window", (-1, -1)) == 15


def test_tflops():
    assert tflops(2e12, 0.5) == 4.0
