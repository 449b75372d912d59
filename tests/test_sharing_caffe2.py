"""Parameter naming and sharing, as a table of (.mdl program, exact set of full names).

The first cases are Caffe2's caffe2/python/modeling/parameter_sharing_test.py written in
.mdl (a `get_parameter_name('w')` there is a `param w` here); then the docstring of
`_resolve_scope_overrides`; then the call-scoping rules of the language page; then the
errors (shape conflicts, bad share targets, cycles) with their message and location.
"""
from __future__ import annotations

import textwrap

import pytest

from dsl import MdlError, check_source


def params_of(body: str, prelude: str = "") -> set[str]:
    """The full parameter names of a model whose statements are `body`."""
    return set(check_source(program(body, prelude), "t.mdl").graph.params)


def program(body: str, prelude: str = "") -> str:
    body = textwrap.indent(textwrap.dedent(body).strip(), "  ")
    return (f'import "std/rnn.mdl"\n{textwrap.dedent(prelude).strip()}\n'
            f"model M() {{\n  input x : f32[2, 3]\n{body}\n  output y = sum(x)\n}}\n")


W = "param w : f32[2] = ones"

CAFFE2_CASES = {
    # test_parameter_sharing_default_scopes
    "default_scopes": (f"""
        {W}
        scope scope {{
          {W}
          scope scope_2 {{ {W} }}
        }}""", {"w", "scope/w", "scope/scope_2/w"}),
    # test_parameter_sharing_nested_scopes: `.` targets, inner share adds to the outer
    "nested_scopes": (f"""
        scope global_scope {{
          share (model_b = model_a) {{
            {W}                                          # global_scope/w
            scope model_b {{
              share (shared_scope = .) {{
                {W}                                      # global_scope/model_a/w
                scope shared_scope {{ {W} }}             # global_scope/model_a/w
              }}
            }}
            scope model_c {{
              share (shared_scope = .) {{
                {W}                                      # global_scope/model_c/w
                scope shared_scope {{ {W} }}             # global_scope/model_c/w
              }}
            }}
          }}
        }}""", {"global_scope/w", "global_scope/model_a/w", "global_scope/model_c/w"}),
    # test_parameter_sharing_subscopes: a dotted path shares one sub-scope only
    "subscopes": (f"""
        share (global_scope.b = global_scope.a) {{
          scope global_scope {{
            {W}
            scope a {{ {W} }}
            scope b {{ {W} }}
            scope c {{ {W} }}
          }}
        }}""", {"global_scope/w", "global_scope/a/w", "global_scope/c/w"}),
    # the same with both paths relative to a scope where `share` stands
    "subscopes_relative": (f"""
        scope top {{
          share (g.b = g.a) {{
            scope g {{ scope a {{ {W} }}; scope b {{ {W} }} }}
          }}
        }}""", {"top/g/a/w"}),
    # dotted on both sides, deeper than one level
    "dotted_both_sides": (f"""
        share (a.b = c.d) {{
          scope a {{ scope b {{ {W}; scope e {{ {W} }} }} }}
          scope a {{ {W} }}
        }}""", {"c/d/w", "c/d/e/w", "a/w"}),
    # test_create_param: one name in two scopes is two parameters
    "create_param": ("""
        param w : f32[2] = constant(0.5)
        scope some_global_scope { param w : f32[2] = constant(0.5) }""",
                     {"w", "some_global_scope/w"}),
    # test_deep_hierarchy: a/c/e -> a/c/f -> a/d/f -> b/d/f, recursively
    "deep_hierarchy": (f"""
        share (a = b) {{
          scope a {{
            share (c = d) {{
              scope c {{
                share (e = f) {{
                  scope e {{ {W} }}
                }}
              }}
            }}
          }}
        }}""", {"b/d/f/w"}),
    # test_parameter_sharing_brew, with parameters declared by a function `fc`
    "brew": ("""
        f1 = fc(x, 16) as fc1
        scope some_global_scope {
          scope model_a { o = fc(f1, 16) as output }
          share (model_b = model_a) {
            scope model_b {
              share (shared_1 = ., shared_2 = .) {
                scope shared_1 { o = fc(f1, 16) as output }
                scope shared_2 { o = fc(f1, 16) as output }
                scope unshared { o = fc(f1, 16) as output }
              }
            }
          }
        }""", {"fc1/w", "fc1/b",
               "some_global_scope/model_a/output/w", "some_global_scope/model_a/output/b",
               "some_global_scope/model_a/unshared/output/w",
               "some_global_scope/model_a/unshared/output/b"}),
    # _resolve_scope_overrides' docstring: {'scope_b': 'scope_a'}, in scope_b
    # {'shared_child': ''}: scope_a/w, scope_a/w, scope_c/w, scope_a/w,
    # scope_a/unshared_child/w
    "docstring": ("""
        share (scope_b = scope_a) {
          scope scope_a { param w : f32[4] }
          scope scope_b {
            param w : f32[4]
            share (shared_child = .) {
              scope shared_child   { param w : f32[4] }
              scope unshared_child { param w : f32[4] }
            }
          }
          scope scope_c { param w : f32[4] }
        }""", {"scope_a/w", "scope_c/w", "scope_a/unshared_child/w"}),
    # overrides nest: the inner block wins while it lasts, the outer one returns after
    "inner_override_then_outer_returns": (f"""
        share (a = b) {{
          share (a = c) {{ scope a {{ {W} }} }}
          scope a {{ param v : f32[2] = ones }}
        }}
        scope a {{ param u : f32[2] = ones }}""", {"c/w", "b/v", "a/u"}),
    # the longest matching prefix wins
    "longest_prefix": (f"""
        share (a = b, a.x = c) {{
          scope a {{ scope x {{ {W} }}; scope y {{ {W} }} }}
        }}""", {"c/w", "b/y/w"}),
    # prefixes are whole scope names, not strings (Caffe2 compares strings)
    "whole_names_not_string_prefixes": (f"""
        share (a = b) {{ scope ab {{ {W} }}; scope a {{ {W} }} }}""", {"ab/w", "b/w"}),
    # both sides are relative to the scope where `share` stands: a block at the root
    # does not reach s/b
    "relative_to_share_scope": (f"""
        scope s {{ share (b = a) {{ scope b {{ {W} }} }} }}
        share (b = a) {{ scope s {{ scope b {{ {W} }} }} }}""", {"s/a/w", "s/b/w"}),
    # keywords are scope names in `scope`, `share` and `as`
    "keywords_as_scope_names": ("""
        share (for = model) {
          scope for { param w : f32[2] = ones }
          h = linear(x, 3) as in
        }""", {"model/w", "in/W", "in/b"}),
}

PRELUDE = """
def fc(x : f32[N, I], n : int) -> f32[N, n] {
  param w : f32[I, n]
  param b : f32[n]
  return x @ w + b
}
"""


@pytest.mark.parametrize("name", CAFFE2_CASES)
def test_sharing_names(name):
    body, expected = CAFFE2_CASES[name]
    assert params_of(body, PRELUDE) == expected


# ---- call scoping rules of the language page --------------------------------------
CALL_CASES = {
    "unnamed_calls_count_per_block": ("""
        a = linear(x, 3); b = linear(a, 3); c = linear(b, 3)""",
                                      {"linear/W", "linear/b", "linear_1/W", "linear_1/b",
                                       "linear_2/W", "linear_2/b"}),
    "counters_restart_in_scope_blocks": ("""
        a = linear(x, 3)
        scope s { b = linear(a, 3); b = linear(b, 3) }
        c = linear(b, 3)""", {"linear/W", "linear/b", "linear_1/W", "linear_1/b",
                              "s/linear/W", "s/linear/b", "s/linear_1/W", "s/linear_1/b"}),
    "counters_restart_in_function_bodies": ("""
        a = two(x); b = two(a)""",
                                            {f"{t}/{lin}/{p}" for t in ("two", "two_1")
                                             for lin in ("linear", "linear_1")
                                             for p in ("W", "b")}),
    "if_bodies_continue_counters": ("""
        a = linear(x, 3)
        if sum(x) > 0.0 { a = linear(a, 3) } else { a = linear(a, 3) }
        a = linear(a, 3)""", {f"{s}/{p}" for s in ("linear", "linear_1", "linear_2",
                                                   "linear_3") for p in ("W", "b")}),
    "constant_if_continues_counters": ("""
        a = linear(x, 3)
        if true { a = linear(a, 3) }
        a = linear(a, 3)""", {f"{s}/{p}" for s in ("linear", "linear_1", "linear_2")
                               for p in ("W", "b")}),
    "loop_body_is_one_call_site_and_continues_counters": ("""
        xs = stack([x, x, x])
        h = linear(x, 3)
        for xt in xs { h = linear(xt, 3) + linear(h, 3) }
        h = linear(h, 3)""", {f"{s}/{p}" for s in ("linear", "linear_1", "linear_2",
                                                   "linear_3") for p in ("W", "b")}),
    "while_bodies_continue_counters": ("""
        h = linear(x, 3)
        while norm(h) > 1.0 { h = 0.5 * linear(h, 3) }
        h = linear(h, 3)""", {f"{s}/{p}" for s in ("linear", "linear_1", "linear_2")
                               for p in ("W", "b")}),
    "as_twice_in_one_scope_shares": ("""
        a = linear(x, 3) as proj
        b = linear(a, 3) as proj""", {"proj/W", "proj/b"}),
    "as_does_not_advance_the_counter": ("""
        a = linear(x, 3) as proj
        b = linear(a, 3)""", {"proj/W", "proj/b", "linear/W", "linear/b"}),
    "reentering_a_scope_shares": ("""
        scope s { a = linear(x, 3) }
        scope s { b = linear(a, 3) }""", {"s/linear/W", "s/linear/b"}),
    "different_functions_count_separately": ("""
        a = linear(x, 3); h = gru(a, a); b = linear(h, 3)""",
                                             {"linear/W", "linear/b", "linear_1/W",
                                              "linear_1/b", "gru/W", "gru/U", "gru/bW",
                                              "gru/bU"}),
    "towers": ("""
        scope fc0 { o1 = two_level_fc(x) }
        scope fc0 { o2 = two_level_fc(x) }
        scope fc0 { o3 = two_level_fc(x) }
        o4 = two_level_fc(x)""", {f"{s}two_level_fc/level{i}/{p}" for s in ("fc0/", "")
                                  for i in (0, 1) for p in ("W", "b")}),
}

CALL_PRELUDE = """
def two(x : f32[N, I]) -> f32[N, I] { return linear(linear(x, I), I) }
def two_level_fc(x : f32[N, I]) -> f32[N, 20] {
  return linear(linear(x, 20) as level0, 20) as level1
}
"""


@pytest.mark.parametrize("name", CALL_CASES)
def test_call_scoping(name):
    body, expected = CALL_CASES[name]
    assert params_of(body, CALL_PRELUDE) == expected


def test_shared_parameter_lists_every_use():
    cm = check_source(program("""
        a = linear(x, 3) as proj
        b = linear(a, 3) as proj""", ""), "t.mdl")
    uses = [str(u) for u in cm.graph.params["proj/W"].uses]
    assert uses == ["t.mdl:5:7", "t.mdl:6:7"]


# ---- errors: (program body, message substring, line:col) --------------------------
ERRORS = {
    "shape_conflict_same_scope": ("""
        param w : f32[3] = ones
        scope s { param v : f32[3] }
        param w : f32[4] = ones""", "parameter `w` is declared as f32[4] here but as "
                                    "f32[3]", "7:9"),
    "shape_conflict_through_share": ("""
        scope a { param w : f32[3] }
        share (b = a) { scope b { param w : f32[2, 3] } }""",
                                     "parameter `a/w` is declared as f32[2, 3] here but as "
                                     "f32[3]", "6:35"),
    "target_inside_source": ("""
        share (a = a.child) { scope a { param w : f32[3] } }""",
                             "share target `a.child` lies inside its source `a`", "5:10"),
    "target_is_source": ("""
        share (a = a) { scope a { param w : f32[3] } }""",
                         "share target `a` is the same as its source `a`", "5:10"),
    "cycle_in_one_block": ("""
        share (a = b, b = a) { scope a { param w : f32[3] } }""",
                           "map scopes in a cycle", "5:10"),
    "cycle_across_nested_blocks": ("""
        share (a = b) { share (b = a) { scope a { param w : f32[3] } } }""",
                                   "map scopes in a cycle", "5:26"),
    "shared_twice_in_one_block": ("""
        share (a = b, a = c) { scope a { param w : f32[3] } }""",
                                  "`a` is shared twice in one block", "5:17"),
}


@pytest.mark.parametrize("name", ERRORS)
def test_sharing_errors(name):
    body, message, where = ERRORS[name]
    with pytest.raises(MdlError) as info:
        check_source(program(body), "t.mdl")
    err = info.value
    assert message in err.message
    assert f"{err.loc.line}:{err.loc.col}" == where


def test_a_long_chain_of_shares_resolves_and_a_long_cycle_is_one():
    """QA: 1000 pairs `a0 = a1, a1 = a2, ...` took 44 s to check (each hop merged every
    block again), 2000 minutes; a chain past Python's recursion limit was called a cycle."""
    pairs = ", ".join(f"a{i} = a{i + 1}" for i in range(1500))
    cm = check_source(program(f"share ({pairs}) {{ scope a0 {{ param w : f32[3] }} }}"),
                      "t.mdl")
    assert "a1500/w" in cm.graph.params
    with pytest.raises(MdlError, match="map scopes in a cycle: `a0` never resolves"):
        check_source(program(f"share ({pairs}, a1500 = a0) {{ scope a0 {{ param w : f32[3] }} }}"),
                     "t.mdl")


def test_shape_conflict_names_both_places():
    with pytest.raises(MdlError) as info:
        check_source(program("""
            param w : f32[3] = ones
            param w : f32[4] = ones"""), "t.mdl")
    assert str(info.value.loc) == "t.mdl:6:9"
    rendered = info.value.render()
    assert "t.mdl:6:9: error:" in rendered and "t.mdl:5:9" in rendered


def test_brew_shape_conflict():
    """test_parameter_sharing_brew: re-creating fc1 with other dims must fail."""
    with pytest.raises(MdlError) as info:
        check_source(program("""
            a = fc(x, 16) as fc1
            b = fc(x, 2) as fc1""", PRELUDE), "t.mdl")
    assert info.value.message.startswith("parameter `fc1/w` is declared as f32[3, 2] here but "
                                         "as f32[3, 16]")
    assert str(info.value.loc) == "t.mdl:10:7"
    assert "t.mdl:9:7" in info.value.render()


def test_shape_conflict_through_calls_names_both_call_sites():
    with pytest.raises(MdlError) as info:
        check_source(program("""
            a = linear(x, 3) as proj
            b = linear(a, 4) as proj"""), "t.mdl")
    assert str(info.value.loc) == "t.mdl:6:7"  # the second call, in the user's file
    rendered = info.value.render()
    assert "`proj/W`" in rendered and "t.mdl:5:7" in rendered
