"""Bad programs: each must give its message at its line:col, never a traceback."""
import pytest

from dsl import MdlError, check_source

# (source, a substring of the first message, "LINE:COL" it must point at)
BAD_PROGRAMS = [
    ('model M() { input x : f32[B * 2]; output y = sum(x) }',
     'unknown name `B`: a symbolic dim is introduced where it stands alone as a dim of an '
     'input (`f32[B, ...]`); a dim made of others (`B * 2`) uses those of an earlier input',
     "1:27"),
    ('model M() { input x : f32[2 * relu]; output y = sum(x) }',
     '`relu` is a function and cannot name a symbolic dim', "1:31"),
    ('model M() { input x : f32[B]; output y = x + z }',
     'unknown name `z`', "1:46"),
    ('model M() { input x : f32[B, 4]; param W : f32[5, 3]; output y = x @ W }',
     '`@` needs matching inner dims, got f32[B, 4] @ f32[5, 3]', "1:68"),
    ('model M() { input x : f32[B]; input y : f32[C]; output z = x + y }',
     '`+` needs shapes that broadcast, got f32[B] and f32[C]', "1:62"),
    ('model M() { input x : f32[B]; output y = x // x }',
     '`//` is not defined for f32 (needs i32)', "1:44"),
    ('model M() { input x : i32[B]; output y = x % (7 // 0) }',
     'division by zero', "1:49"),
    ('model M() { input x : f32[B]; output y = x * 10.0 ** 400.0 }',
     '10.0 ** 400.0 is out of range', "1:51"),
    ('model M() { input x : f32[B]; output y = x * (-8.0) ** 0.5 }',
     '(-8.0) ** 0.5 is not a real number', "1:53"),
    ('model M(K = 0) { input x : f32[B]; z = zeros[B * K]; output y = sum(x) + sum(z) }',
     'dims must be positive, got 0 (K = 0)', "1:48"),
    ('model M() { input x : f32[T, -T]; output y = x }',
     'dims must be positive, got -T (0 or less whatever T is)', "1:30"),
    ('model M() { input a : f32[T, B]; input x : f32[-T * B - B]; output y = x }',
     'dims must be positive, got -B*T - B (0 or less whatever B, T is)', "1:55"),
    ('model M() { input x : i32[B]; output y = x + 7.5 % 2 }',
     '`%` is not defined for float 7.5', "1:50"),
    ('model M() { input x : i32[B]; output y = x * 0.5 }',
     'the float constant 0.5 cannot combine with i32[B]', "1:46"),
    ('model M() { input x : f32[B]; output y = tanh(x, x) }',
     '`tanh` takes at most 1 argument (x), got 2', "1:50"),
    ('model M() { input x : f32[B]; output y = foo(x) }',
     'unknown function `foo`', "1:42"),
    ('def f(x : f32[N]) -> f32[N] { return f(x) }\nmodel M() { input x : f32[B]; output y = f(x) }',
     'recursive call of `f` (f -> f): functions are inlined, so recursion is not supported', "1:38"),
    ('model M() { input x : f32[B]; if x { y = x } else { y = x }; output z = y }',
     'an `if` condition must be a bool scalar, got f32[B] (for elementwise choice use where(c, a, b))', "1:34"),
    ('model M() { input x : f32[B]; if sum(x) > 0.0 { y = x } ; output z = y }',
     '`y` is assigned only in the then branch', "1:70"),
    ('model M() { input x : f32[B]; if sum(x) > 0.0 { y = x } else { y = sum(x) }; output z = y }',
     '`y` is f32[B] after the then branch but f32 after the else branch', "1:31"),
    # an `if` without `else` keeps the value from before it: it spoke of "the else branch"
    ('model M() { input xs : f32[T, B, 3]; h = zeros[B, 3]\n'
     '  for x in xs { if sum(x) > 0.0 { h = sum(x) } }\n  output o = sum(h) }',
     '`h` is f32 after the then branch but f32[B, 3] before the `if` (kept where its '
     'condition is false)', "2:17"),
    ('model M() { input xs : f32[T, B]; h = zeros[B]; for x in xs { h = concat([h, x]) }; output z = h }',
     'loop state `h` changes type: f32[B] before, f32[2*B] after one step (state keeps its type)', "1:49"),
    ('model M() { input xs : f32[T, B]; hs = for x in xs { h = x }; output z = hs }',
     "this loop's values are assigned, so its body needs a `yield`", "1:40"),
    ('model M() { input xs : f32[T, B]; for x in xs { yield x }; output z = xs }',
     'a `for` statement has no values to yield; assign the loop: `hs = for ...`', "1:49"),
    ('model M() { input xs : f32[T, B]; for x in f(xs) { y = x }; output z = xs }',
     'unknown loop option `xs` (options are lengths = L, recompute, checkpoint = k); to loop over `f(xs)`, bind it to a name first: `ys = f(xs)`, then `for x in ys`', "1:46"),
    ('model M() { input xs : f32[T, B]; hs = for x in xs (recompute, checkpoint = 4) { yield x }; output z = hs }',
     '`recompute` and `checkpoint` exclude each other', "1:64"),
    ('model M() { input x : f32[B]; share (a = a.b) { param w : f32[4] }; output z = x }',
     'share target `a.b` lies inside its source `a`', "1:38"),
    ('model M() { input x : f32[B]; scope a { param w : f32[4] }; scope a { param w : f32[5] }; output z = x }',
     'parameter `a/w` is declared as f32[5] here but as f32[4] by t.mdl:1:47', "1:77"),
    ('import "nope.mdl"\nmodel M() { input x : f32[B]; output z = x }',
     'cannot find `nope.mdl`', "1:8"),
    ('model M() { input x : f32[B]; scope s { output z = x } }',
     '`output` must stand directly in the model body', "1:48"),
    ('def f(x : f32[N], n : int) -> f32[N] { return x }\nmodel M() { input x : f32[B]; output z = f(x, x) }',
     'argument `n` of `f` is an `int` known at compile time, got a tensor f32[B]', "2:47"),
    ('model M() { input x : f32[B]; output y = x; minimize y }',
     'the minimized output must be a float scalar, `y` is f32[B]', "1:54"),
    ('model M() { input x : f32[B]; while sum(x) > 1.0 { y = x }; output z = x }',
     'this `while` assigns no variable that exists before it, so its condition can never change', "1:31"),
    ('model M(H = 4) { input x : f32[B, H]; output y = split(x, 3, axis = 1) }',
     '`split` into 3 parts needs axis 1 of f32[B, 4] to divide by 3', "1:50"),
    ('model M() { input x : f32[B, 6]; a, b = split(x, 3, axis = 1); output y = a }',
     '`split` gives 3 values, assigned to 2 names: write a name for each '
     '(`a, b, c = split(...)`)', "1:34"),
    ('model M() { input x : f32[B]; a, b = tanh(x); output y = a }',
     '1 value for 2 targets', "1:31"),
    ('import "std/rnn.mdl"\nmodel M() { input x : f32[B, 3]; h = zeros[B, 4]\n'
     '  h = lstm(x, h, h); output y = h }',
     '`lstm` gives 2 values, assigned to 1 name: write a name for each '
     '(`a, b = lstm(...)`)', "3:3"),
    ('model M() { input x : f32[B]; output y = sum(x, axis = 2) }',
     'axis 2 is out of range for rank 1', "1:56"),
    ('model M() { input x : f32[B]; output y = x[0:3, 1] }',
     '2 subscripts for f32[B]', "1:43"),
    ('model M() { input x : f32[4]; output y = x[7] }',
     'index 7 is out of range for f32[4]', "1:44"),
    ('model M() { input x : f32[B]; output y = reshape(x, [3, 5]) }',
     '`reshape` cannot turn f32[B] (B elements) into shape [3, 5] (15 elements)', "1:42"),
    ('model M() { input x : f32[B]; y = x; y = 3; output z = y @ y }',
     '`@` needs tensors, got two scalars', "1:58"),
    ('model M() { input x : f32[B]; output y = softmax(x, axis = 1) }',
     'axis 1 is out of range for rank 1', "1:60"),
    ('model M() { input x : f32[B, 3]; output y = cross_entropy(x, x) }',
     '`cross_entropy` needs i32 targets, got f32[B, 3]', "1:45"),
    ('model M() { input x : f32[B]; param w : f32[3] = foo(1); output y = x }',
     'an initializer is one of zeros, ones, xavier, orthogonal, constant, uniform, normal', "1:50"),
    ('model M() { input x : f32[B]; scope s (colour = 1) { param w : f32[3] }; output y = x }',
     'unknown scope attribute `colour` (scopes take init, regularizer and trainable)', "1:40"),
    ('model M() { input x : f32[B]; param w : f32[3] = uniform(1, 0); output y = x }',
     'uniform(a, b) needs a < b, got 1.0 and 0.0', "1:50"),
    ('model M() { input x : f32[B]; output y = dropout(x, 1.5) }',
     'the dropout probability must be in [0, 1), got 1.5', "1:53"),
    ('model M() { input x : f32[B]; output y = tanh(x) as t }',
     '`as` names the scope of a function call; the built-in `tanh` opens none', "1:53"),
    ('def f(x : f32[N]) -> f32[N, N] { return x }\nmodel M() { input x : f32[B]; output y = f(x) }',
     '`f` declares result 1 as f32[N, N], here f32[B, B], but returns f32[B]', "1:41"),
    ('def f(x : f32[N]) { y = x }\nmodel M() { input x : f32[B]; output y = f(x) }',
     'function `f` must end with a `return`', "1:5"),
    ('model M() { input x : f32[B]; output y = x; output y = x }',
     'output `y` is declared twice', "1:52"),
    ('model M() { input x : f32[B]; input x : f32[B]; output y = x }',
     '`x` is already defined', "1:37"),
    ('model DeviceArray() { input x : f32[B]; output y = x }',
     'a model cannot be named `DeviceArray`: the generated module has an attribute of that '
     'name', "1:7"),
    ('model __M() { input x : f32[B]; output y = x }',
     "a model cannot be named `__M`: a model's name cannot start with `__`, which Python "
     "keeps for a module's own attributes", "1:7"),
    ('model M() { input training : f32[B]; output y = training }',
     'an input cannot be named `training`: forward(training=...) says whether a call trains',
     "1:19"),
    ('model M() { input xs : f32[T]; s = 0; for t in range(T, 0, -1) { s = s + t }; output y = s }',
     "a `range` whose start or stop the call binds counts up, by 1; a `for` counts down over "
     "`reversed(range(1, T + 1))`: T, T - 1, ..., 1", "1:60"),
    ('model M() { input xs : f32[T]; output y = range(1, T, 2) }',
     "a `range` whose start or stop the call binds counts by 1, not by 2 (its length would "
     "divide a size): `1 + 2 * range(n)` takes n values by 2", "1:55"),
    ('model M(H = 4) { input x : f32[B]; output y = zeros[H / 3] }',
     '4 is not divisible by 3: `/` in dims must divide exactly', "1:55"),
    ('model M() { input x : f32[B]; z = zeros[-1, 3]; output y = sum(x) + sum(z) }',
     'dims must be positive, got -1', "1:41"),
    ('model M() { input x : f32[B]; output y = sum(ones[2 - 5]) }',
     'dims must be positive, got -3', "1:53"),
    ('model M() { input x : f32[B]; output y = sum(full[-2](1.0)) }',
     'dims must be positive, got -2', "1:51"),
    ('model M(H = -2) { input x : f32[B]; output y = sum(zeros[H]) }',
     'dims must be positive, got -2', "1:58"),
    ('model M() { input x : f32[B]; output y = reshape(zeros[2, 3], [-2, -3]) }',
     'dims must be positive, got -2', "1:64"),
    ('model M() { input x : f32[B]; output y = sum(zeros[3, 0]) }',
     'dims must be positive, got 0', "1:55"),
    ('model M() { input x : f32[B]; output y = sum(range(0)) }',
     'dims must be positive, got 0', "1:52"),
    ('model M() { input x : f32[T]; output y = sum(range(T + 1, T)) }',
     "`range` of -1 values: its stop is below its start", "1:46"),
    ('model M() { input x : f32[B]; param w : f32[B] ; output y = x }',
     "a parameter's shape must be known at compile time, got f32[B]", "1:41"),
    ('model M() { input xs : f32[T, B]; input ys : f32[S, B]; hs = for x in xs, y in ys { yield x + y }; output z = hs }',
     'zipped sequences need one length: `ys` is f32[S, B], `xs` is f32[T, B]', "1:80"),
    ('model M() { input xs : f32[T, B, 3]; input n : i32[T]; hs = for x in xs (lengths = n) { yield x }; output z = hs }',
     'lengths must be i32[B] (one per sequence), got i32[T]', "1:84"),
    ('model M() { input xs : f32[T, B, 3]; input m : f32[T]; input n : i32[B]; for x in xs, y in m (lengths = n) { x = y }; output z = n }',
     'with lengths, every sequence is [T, B, ...], a row a sequence: `m` is f32[T]', "1:92"),
    ('model M() { input xs : f32[T, B, 3]; input n : i32[B]; for x in xs, t in range(T) (lengths = n) { x = x }; output z = n }',
     'with lengths, every sequence is [T, B, ...], a row a sequence: `range(T)` is i32[T] (a row\'s own step count is a state: `i = full[B](0)` before the loop, `i = i + 1` in it)', "1:74"),
    ('model M() { input xs : f32[T, B, 3]; input n : i32[B]; k = 0; for x in xs (lengths = n) { k = k + 1 }; output z = k }',
     'with lengths, loop state and yields are rows per sequence: `k` is i32, its first dim should be B (each row stops at its own length, so a count or a flag is one per row: `full[B](0)`)', "1:63"),
    ('model M() { input xs : f32[T, B, 3]; input n : i32[B]; f = 1.0; for x in xs (lengths = n) { f = 0.0 }; output z = f }',
     'a count or a flag is one per row: `zeros[B]`)', "1:65"),
    # lengths and the second sequence agree on B: the first, [T, C, B], is the wrong one
    ('model M() { input xs : f32[T, C, B]; input ms : f32[T, B]; input n : i32[B]; '
     's = zeros[B]; for x in xs, m in ms (lengths = n) { s = s + sum(x, axis = 0) * m }; '
     'output y = s }',
     'with lengths, every sequence is [T, B, ...], a row a sequence: `xs` is f32[T, C, B]',
     "1:101"),
    ('model M() { input x : f32[B]; sum = x; output z = x }',
     '`sum` is a function and cannot be assigned', "1:31"),
    # `zeros`, `ones` and `full` too: a variable `zeros` made `zeros[B, H]` index it
    ('model M() { input x : f32[B]; zeros = x; output z = zeros[1] }',
     '`zeros` is a function and cannot be assigned', "1:31"),
    ('model M(full = 2) { input x : f32[4]; output y = x + full[4](1.0) }',
     '`full` is a function and cannot name a hyper-parameter', "1:9"),
    ('model M() { input ones : f32[4]; output y = ones + zeros[4] }',
     '`ones` is a function and cannot name an input', "1:19"),
    ('def zeros(x : f32[N]) -> f32[N] { return x }\n'
     'model M() { input x : f32[4]; output y = zeros(x) }',
     '`zeros` is a built-in function; choose another name', "1:5"),
    ('def f(a : f32[N], N : int) -> f32 { return sum(ones[N]) + f32(N) }\n'
     'model M() { input x : f32[3]; output y = f(x, 5) }',
     '`N` is a symbolic dim and cannot name an argument', "1:19"),
    ('model M() { input x : f32[B]; input B : f32[3]; output y = sum(x) + sum(B) }',
     '`B` is a symbolic dim and cannot name an input', "1:37"),
    ('model M() { input T : f32[T]; output y = sum(T) }',
     '`T` is a symbolic dim and cannot name an input', "1:19"),
    ('model M() { input xs : f32[T, 3]; s = zeros[3]; for T in xs { s = s + T }; output y = s }',
     '`T` is a symbolic dim and cannot name a loop variable', "1:53"),
    ('model M() { input xs : f32[T, 3]; s = zeros[3]; for sum in xs { s = s + sum }; '
     'output y = s }',
     '`sum` is a function and cannot name a loop variable', "1:53"),
    ('model M(sum = 3) { input x : f32[B]; output y = x }',
     '`sum` is a function and cannot name a hyper-parameter', "1:9"),
    ('model M(f32 = 3) { input x : f32[B]; output y = x }',
     '`f32` is a function and cannot name a hyper-parameter', "1:9"),
    ('def f(sum : f32[N]) -> f32[N] { return sum }\n'
     'model M() { input x : f32[B]; output y = f(x) }',
     '`sum` is a function and cannot name an argument', "1:7"),
    ('def g(a : f32[N]) -> f32[N] { return a }\ndef f(g : f32[N]) -> f32[N] { return g }\n'
     'model M() { input x : f32[B]; output y = f(x) }',
     '`g` is a function and cannot name an argument', "2:7"),
    # never called: checked where defined (once only at calls)
    ('def f(a : f32[N], N : int) -> f32[N] { return a }\n'
     'model M() { input x : f32[B]; output y = x }',
     '`N` is a symbolic dim and cannot name an argument', "1:19"),
    ('def f(a : f32[a]) -> f32[a] { return a }\nmodel M() { input x : f32[B]; output y = x }',
     '`a` is a symbolic dim and cannot name an argument', "1:7"),
    ('def f(exp : f32[N]) -> f32[N] { return exp }\n'
     'model M() { input x : f32[B]; output y = x }',
     '`exp` is a function and cannot name an argument', "1:7"),
    ('def f(a : f32[N]) -> f32[N] { return a }\ndef g(f : f32[N]) -> f32[N] { return f }\n'
     'model M() { input x : f32[B]; output y = x }',
     '`f` is a function and cannot name an argument', "2:7"),
    ('model M() { input x : f32[max]; output y = x }',
     '`max` is a function and cannot name a symbolic dim', "1:27"),
    ('model M() { input x : f32[T]; param T : f32[3]; output y = x }',
     '`T` is a symbolic dim and cannot name a parameter', "1:37"),
    ('model M() { input x : f32[B]; output z = x + true }',
     'the bool constant true cannot combine with f32[B]', "1:46"),
    ('model M() { input x : f32[B]; output z = where(x, x, x) }',
     '`where` needs a bool condition, got f32[B]', "1:42"),
    ('model A() { input x : f32[B]; output z = x }\nmodel A() { input x : f32[B]; output z = x }',
     'model `A` is defined twice', "2:7"),
    ('model M() { input x : f32[B]',
     'unexpected end of file: `{` is never closed', "1:11"),
    ('model M() { input x : f32[B]; output y = (x + 1 }',
     '`}` does not match the `(` opened at t.mdl:1:42', "1:49"),
    # a bracket left open at a line's end: the error was the next statement's first word
    # ("unexpected `output` here"; "`output` is a keyword and cannot be used as a name")
    ('model M() {\n  input x : f32[3]\n  y = sum(x\n  output z = sum(y)\n}',
     '`(` is never closed: the statement on line 4 starts before it is', "3:10"),
    ('model M() {\n  input x : f32[3]\n  y = x[\n\n  z = y\n  output w = z\n}',
     '`[` is never closed: the statement on line 5 starts before it is', "3:8"),
    # a float or bool where a dim goes: it said only that a hyper-parameter may be one
    ('model M(H = 8, G = H / 3) { input x : f32[G]; output o = sum(x) }',
     "a dim must be an integer known at compile time (a literal, a hyper-parameter or a "
     "symbolic dim): `G` is the float 2.66667 (an integer `/` that does not divide makes a "
     "float; `//` floors)", "1:43"),
    ('model M(H = true) { input x : f32[H]; output o = sum(x) }',
     "`H` is the bool true", "1:35"),
    ('model M() { input x : f32[4 * 1.5]; output o = sum(x) }',
     "symbolic dim): this is the float 1.5", "1:31"),
    # `+=`: it said "a statement cannot be a bare expression"
    ('model M() { input x : f32[3]; y = x\n  y += x\n  output o = sum(y) }',
     '`+=` is not mdl: write `y = y + ...`', "2:5"),
    ('model M() { input x : f32[3]; y = x\n  y **= x\n  output o = sum(y) }',
     '`**=` is not mdl: write `y = y ** ...`', "2:5"),
    # ... but not where the line closes it: a `,` is missing there
    ('model M() {\n  input x : f32[3, 2]\n  y = sum(x\n    axis = 1)\n  output z = y\n}',
     'unexpected `axis` here', "4:5"),
    ('model M() { input x : f32[B]; output for = x }',
     '`for` is a keyword and cannot be used as a name here', "1:38"),
    ('model M() { input xs : f32[T, B]; hs = for x in xs (reversed) { yield x }; output z = hs }',
     '`reversed` is not a loop option: it goes around the sequence, '
     '`for x in reversed(xs) (...)`', "1:53"),
    ('model M() { input x : f32[B, 4]; output y = softmax(x, axis = [0, 1]) }',
     'this `axis` is one axis, not a list', "1:63"),
    # a rank-0 value has no axis 0: these passed the checker and failed in the backend
    ('model M() { input s : f32; output y = sum(concat([s, s])) }',
     'axis 0 is out of range for rank 0', "1:43"),
    ('model M() { input s : f32; output z = softmax(s, axis = 0) }',
     'axis 0 is out of range for rank 0 (a rank-0 value has no axes)', "1:57"),
    # the axes a rank has, and what a wrong axis is
    ('model M() { input x : f32[B, 3]; output z = swapaxes(x, 0, 2) }',
     'axis 2 is out of range for rank 2 (axes -2 to 1)', "1:60"),
    ('model M() { input x : f32[B, 3]; output z = softmax(x, axis = -1.0) }',
     'axis must be a compile-time int, got the float -1.0', "1:63"),
    # a path too long for the file system is not found, not an internal OSError
    ('import "' + 'a' * 300 + '.mdl"\nmodel M() { input x : f32[3]; output y = sum(x) }',
     'cannot find `' + 'a' * 300 + '.mdl`', "1:8"),
    ('model M() { input x : f32[B]; output y = f(reversed) }',
     '`reversed` is a keyword and cannot be used as a name here', "1:44"),
    ('model M() { input x : f32[B]; output y = 0.0 < x < 1.0 }',
     'comparisons do not chain: write `a < b and b < c`', "1:50"),
    # a number for a tensor argument: it said "a tensor i32[...]"
    ('def f(x : f32[N], n : i32[]) -> f32[N] { return x * f32(n) }\n'
     'model M() { input x : f32[3]; output y = sum(f(x, 2)) }',
     'argument `n` of `f` is a tensor i32[], got the scalar 2', "2:51"),
    # a step: it said "expected an expression, found `:`" and "unexpected `:`"
    ('model M() { input x : f32[B]; output y = x[::-1] }',
     'a slice takes no step: write `x[a:b]`', "1:45"),
    ('model M() { input x : f32[B, 4]; output y = x[0:2, 0:4:2] }',
     'a slice takes no step: write `x[a:b]`', "1:55"),
    ('model M() { input x : f32[B]; output y = x ? x }',
     'unexpected character `?`', "1:44"),
    ('model M() { input x : f32[B]; output y = x * 3000000000 }',
     'integer literal 3000000000 does not fit in i32', "1:46"),
    ('model M(N = 65536) { input x : i32[B]; output y = x + N * N }',
     'the integer 4294967296 does not fit in i32', "1:57"),
    ('model M(N = 2000000000) { param w : f32[N, N] = zeros; output y = sum(w) }',
     'f32[2000000000, 2000000000] would take 1.6e+19 bytes, more than 2**60', "1:37"),
    ('model M(N = 2000000000) { input x : f32[B, N]; output y = x @ ones[N, N] }',
     'f32[2000000000, 2000000000] would take 1.6e+19 bytes, more than 2**60', "1:67"),
    ('model M(N = 2000000000) { input x : f32[B, N * N] }',
     'f32[B, 4000000000000000000] would take more than 2**60 bytes (1.6e+19 with B = 1)',
     "1:37"),
    # more dims than the kernels index: accepted, then a segfault or wrong sums
    ('model M() { input x : f32[2, 3, 2, 3, 2, 3, 2, 3, 2]; output y = sum(x, axis = 1) }',
     'f32[2, 3, 2, 3, 2, 3, 2, 3, 2] has 9 dims; a value has at most 8', "1:23"),
    ('model M() { input x : f32[B, 16]; output y = sum(reshape(x, [B, 1, 1, 1, 1, 1, 1, 1, 16])) }',
     'f32[B, 1, 1, 1, 1, 1, 1, 1, 16] has 9 dims; a value has at most 8', "1:50"),
    ('model M() { input xs : f32[T, 1, 1, 1, 1, 1, 1, 2]; h = zeros[1, 1, 1, 1, 1, 1, 1, 2]\n'
     'hs = for x in xs { h = h + x; yield h }; output y = sum(hs) }',
     'this loop stacks its yield of f32[1, 1, 1, 1, 1, 1, 1, 2] over its steps, into 9 dims; '
     'a value has at most 8', "2:6"),
    # a call's arguments then options: it said "a loop takes one list of options" alone
    ('model M() { input xs : f32[T, B]; input n : i32[B]; h = zeros[B]\n'
     'for x in tanh(xs) (lengths = n) { h = h + x }; output y = sum(h) }',
     'a loop takes one list of options; to loop over `tanh(xs)`, bind it to a name first: '
     '`ys = tanh(xs)`, then `for x in ys (...)`', "2:20"),
    # a default that does not fit: shown where it is written (it showed the call)
    ('def f(x : f32[..., K], y : f32[..., K] = 1.0) -> f32[..., K] { return x * y }\n'
     'model M() { input x : f32[B, 4]; output y = f(x) }',
     "argument `y` of `f` is a tensor f32[..., K], got the scalar 1.0", "1:42"),
    # the same inside `reversed`: it said "loop options go after the sequence"
    ('model M() { input xs : f32[T, B, 4]; h = zeros[T, 4]\n'
     'for x in reversed(swapaxes(xs, 0, 1)) { h = h + x }; output y = sum(h) }',
     "`reversed` takes a named sequence, not a call's result; to loop over "
     "`swapaxes(xs, 0, 1)` backwards, bind it to a name first: `ys = swapaxes(xs, 0, 1)`, "
     "then `for x in reversed(ys)`", "2:28"),
    ('model M() { input xs : f32[T, B]; input n : i32[B]; h = zeros[B]\n'
     'for x in reversed(tanh(xs)) (lengths = n) { h = h + x }; output y = sum(h) }',
     "to loop over `tanh(xs)` backwards, bind it to a name first: `ys = tanh(xs)`, then "
     "`for x in reversed(ys) (...)`", "2:24"),
    # a call of no arguments: it said "expected an expression, found `)`"
    ('def g(xs : f32[T, B]) -> f32[T, B] { return tanh(xs) }\n'
     'model M() { input xs : f32[T, B]; h = zeros[B]\n'
     'for x in g() { h = h + x }; output y = sum(h) }',
     "a loop's sequence is a name, not a call's result; to loop over `g()`, bind it to a "
     "name first: `ys = g()`, then `for x in ys`", "3:10"),
    ('def g(xs : f32[T, B]) -> f32[T, B] { return tanh(xs) }\n'
     'model M() { input xs : f32[T, B]; h = zeros[B]\n'
     'for x in reversed(g()) { h = h + x }; output y = sum(h) }',
     "`reversed` takes a named sequence, not a call's result; to loop over `g()` "
     "backwards, bind it to a name first: `ys = g()`, then `for x in reversed(ys)`", "3:19"),
    ('model M() { input xs : f32[T, B]; h = zeros[B]\n'
     'for x in reversed(xs) () { h = h + x }; output y = sum(h) }',
     "a loop's options are not empty: leave out the `()`", "2:19"),
    ('model M() { input xs : f32[T, B]; h = zeros[B]\n'
     'for x in reversed(xs (recompute)) { h = h + x }; output y = sum(h) }',
     "loop options go after the sequence: `for x in reversed(xs) (...)`", "2:23"),
    ('model M() { input xs : f32[T, B]; h = zeros[B]\n'
     'for x in tanh(xs + 1.0) { h = h + x }; output y = sum(h) }',
     "a loop option is a name or `name = value` (options are lengths = L, recompute, "
     "checkpoint = k); to loop over a call's result, bind it to a name first: "
     "`ys = tanh(...)`, then `for x in ys`", "2:18"),
    # a constant bound past the start: it said "slice 0:-1 ... ends before it starts"
    ('model M() { input x : f32[T, 4]; output y = x[:, -4:-5] }',
     'bound -5 is out of range for axis 1 of f32[T, 4], of length 4', "1:53"),
    ('model M() { input x : f32[B]; output y = x + }',
     'expected an expression, found `}`', "1:46"),
    ('import "abc',
     'unterminated string', "1:8"),
    ('model M() { input x : f32[B]; else { y = x } }',
     '`else` without a matching `if` block before it', "1:31"),
    ('model M() { input xs : f32[T]; for x xs { y = x } }',
     'unexpected `xs`, expected `in`', "1:38"),
    # QA: Python's forms of a loop's and a share's header, once "unexpected `,`" or "`.`"
    ('model M() { input ys : f32[T]; input ts : f32[T]; zs = for y, t in ys, ts { yield y } }',
     'a loop over several sequences gives each its own `in`: `for y in ys, t in ts`, not '
     "`for y, t in ys, ts`", "1:61"),
    ('model M() { input i : i32[T]; zs = for x in e.table[i] { yield x } }',
     "a loop's sequence is a name, not a parameter's path: bind it to a name first: `ys = "
     "e.table[i]`, then `for x in ys`", "1:46"),
    ('model M() { input i : i32[T]; zs = for x in reversed(e.t) { yield x } }',
     "a loop's sequence is a name, not a parameter's path: bind it to a name first: `ys = "
     "e.t`, then `for x in reversed(ys)`", "1:55"),
    ('model M() { input i : i32[T]; zs = for x in reversed(e.t[i[0]]) { yield x } }',
     "a loop's sequence is a name, not a parameter's path: bind it to a name first: `ys = "
     "e.t[i[0]]`, then `for x in reversed(ys)`", "1:55"),
    ('model M() { input x : f32[3]; share (a = b, . = c) { param w : f32[3] }; output y = x }',
     "`.` stands for the scope a `share` is in, on the right of a pair only (`share (child = "
     ".)`); on the left is the name of a scope inside it", "1:45"),
    ('model M { input x : f32[B] }',
     'unexpected `{`, expected `(`', "1:9"),
    ('model M() { input x : f32[B]; x + 1 }',
     'a statement cannot be a bare expression; assign its value: `y = ...`', "1:31"),
    ('model M() { input x : f32[B]; output y = x } }',
     'unmatched `}`', "1:46"),
    ('model M() { input x : f32[B]; output y = x.w }',
     'no parameter `x.w` is visible from scope `(root)`', "1:44"),
    ('model M() { input x : f32[B]; scope a { param w : f32[3] = ones }; output y = x + sum(b.w) }',
     'no parameter `b.w` is visible from scope `(root)`', "1:89"),
    ('model M() { input x : f32[B]; share (a = b) { share (b = a) { scope a { param w : f32[2] } } }; output y = x }',
     'these share blocks map scopes in a cycle: `b` never resolves', "1:54"),
    ('model M() { input x : f32[B]; share (a = b, a = c) { param w : f32[2] }; output y = x }',
     '`a` is shared twice in one block', "1:45"),
    ('model M() { input x : f32[B]; output y = x; minimize y; minimize y }',
     'the minimized output must be a float scalar, `y` is f32[B]', "1:54"),
    ('model M() { input x : f32[B]; h = zeros[ : B]; output y = x + h }',
     'a slice `a:b` only selects inside an index', "1:42"),
    ('model M(K = 3) { input x : f32[B, 2]; v, i = topk(x, K); output y = v }',
     '`topk` takes 1 to 2 values along an axis of 2, got k = 3', "1:46"),
    ('model M() { input x : f32[B, 4]; v, i = topk(x, 2, axis = 0); output y = v }',
     '`topk` needs the size of its axis known when compiling (a number or a hyper-parameter), got B',
     "1:41"),
    ('model M() { input x : f32[B, 4]; input k : i32; v, i = topk(x, k); output y = v }',
     'the number of values `k` must be a compile-time int', "1:64"),
    ('model M() { input x : bool[B, 4]; v, i = topk(x, 2); output y = i }',
     '`topk` is not defined for bool', "1:42"),
    ('model M() { input x : bool[B, 4]; output y = min(x, axis = 1) }',
     '`min` is not defined for bool (needs f32 or f64 or i32)', "1:50"),
    ('model M() { input x : i32[B, 4]; output y = gelu(x) }',
     '`gelu` is not defined for i32 (needs f32 or f64)', "1:50"),
    ('model M() { input x : f32[B, 4]; output y = elu(x, alpha = x) }',
     "elu's `alpha` must be a compile-time float", "1:60"),
    ('model M() { input x : f32[B, 4]; output y = argmin(sum(x)) }',
     '`argmin` needs a tensor of rank 1 or more, got f32', "1:52"),
    ('model M() { output y = log1p(-2) }', 'log1p(-2) has no finite value', "1:30"),
    ('model M() { param w : f32[3] = constant(1e308 * 10.0); output y = w }',
     '1e+308 * 10.0 has no finite value', "1:47"),
    ('model M() { scope a (regularizer = l2(1e308 / 1e-10)) { param w : f32[3] }; '
     'output y = w }', '1e+308 / 1e-10 has no finite value', "1:45"),
    ('model M() { input xs : f32[T, B]; for x in xs { assert x }; output y = xs }',
     'an `assert` condition must be bool (a comparison, as `x > 0.0`), got f32[B]', "1:56"),
    ('def f(x : f32[N]) -> f32[N] { assert 1 > 2, "no"; return x }\n'
     'model M() { input x : f32[B]; output y = f(x) }', 'no: `1 > 2` is always false', "1:40"),
    ('model M() { input x : f32[B]; assert x, "x"; output y = x }',
     'an `assert` condition must be bool (a comparison, as `x > 0.0`), got f32[B]', "1:38"),
    ('model M(H = 6) { input x : f32[B]; assert H % 4 == 0, "H splits in 4"; output y = x }',
     'H splits in 4: `H % 4 == 0` is always false', "1:49"),
    ('model M() { input x : f32[B]; assert 2, "two"; output y = x }',
     'an `assert` condition must be bool (a comparison, as `x > 0.0`), got int', "1:38"),
    ('model M() { input x : f32[B]; assert sum(x) > 0.0, "top\0level"; output y = x }',
     "an assert's message cannot hold the control character U+0000", "1:56"),
    ('model M() { input x : f32[B]; assert sum(x) > 0.0, "\x1b[2J"; output y = x }',
     "an assert's message cannot hold the control character U+001B", "1:53"),
    ('model M() { input x : f32[B]; assert = 2; output y = x }',
     '`assert` is a keyword', "1:31"),
    ('model M(A = 10 ** 10 ** 10) { input x : f32[3]; output z = sum(x) }',
     '10 ** 10000000000 is out of range', "1:16"),
    ('model M() { input x : f32[B, 4]; y = x; while sum(x) > 0.0 { y = y * 0.5 }; '
     'output z = sum(y) }',
     'this `while` condition reads none of the variables its body assigns (y)', "1:54"),
    # found by a QA pass (2026-12-04): each was silent, or named what the user never wrote
    ('model M() { input x : f32[3]; param w : f32[3] = constant(1e39); output y = x * w }',
     '`constant(1e+39)` holds 1e+39, past the range of f32: the weights of this f32[3] '
     'would be inf', "1:50"),  # every weight was inf
    ('model M() { input x : f32[3]; output y = 1e39 * x }',
     '1e+39 is past the range of f32, where it would be inf', "1:42"),
    # a QA pass (2026-12-07): the module's output was inf
    ('model M() { input x : f32[3]; output y = full[3](1e39) + x }',
     '1e+39 is past the range of f32, where it would be inf', "1:50"),
    ('model M() { input x : i32[3]; k = 7 / 2; output y = x + k }',
     'the float constant 3.5 cannot combine with i32[3]', "1:57"),  # "float literal 3.5"
    ('model M() { input x : bool[3]; output y = -x }',
     'unary `-` is not defined for bool', "1:43"),  # "`neg` is not defined"
    ('model M() { input x : f32[4]; input t : i32[4]; output y = mse(x, t) }',
     '`mse` takes two tensors of one dtype, got f32[4] and i32[4] (cast one with f32(...) '
     'or i32(...))', "1:60"),  # "`-` needs"
    ('model M() { input x : f32[3]; input m : bool[3]; output y = x + m }',
     'got f32[3] and bool[3] (cast one with f32(...) or bool(...))', "1:63"),  # f32, i32
    ('model M() { input x : f32[3]; output y = x + f64(x) }',
     'got f32[3] and f64[3] (cast one with f32(...) or f64(...))', "1:44"),
    ('model M() { input x : f32[3]; y = x as foo; output z = y }',
     '`as` names the scope of a function call', "1:37"),  # "`as` is a keyword"
    ('model M() { input x : f32[3]; output y = x + 0x10 }',
     '`0x10` is no number: mdl writes numbers in decimal', "1:46"),  # "a bare expression"
    ('model M() { input x : f32[3]; output y = x + 1_000 }',
     '`1_000` is no number', "1:46"),
    ('model M() { input a : f32[B, 3]; input i : i32; output y = a[:, i] }',
     'not a value the model computes (i32); such a value indexes the first axis only',
     "1:65"),  # "a dim must be an integer known at compile time"
    ('model M() { input a : f32[B, 3]; output z = zeros[B // 2] }',
     '`//` does not apply to symbolic dims', "1:53"),  # B is one: "a dim must be ..."
    ('model M() { input a : f32[4]; output y = a[2:1] }',
     'slice 2:1 of axis 0 of f32[4] ends before it starts', "1:45"),  # "out of range"
    ('model M() { input x : f32[3]; output y = 2.0 *\u00a0x }',
     'unexpected character U+00A0 (no-break space)', "1:47"),  # printed raw
    # a QA pass's greedy decoder: "`while` is a keyword and cannot be used as a name here"
    ('model M() { input x : f32[3]; h = x; ys = while sum(h) > 1.0 { h = 0.5 * h } }',
     'a `while` yields no values to assign (a `for` does', "1:43"),
    ('model M() { input x : f32[3]; y = if sum(x) > 0.0 { x } }',
     'an `if` is a statement, not a value: assign in both branches', "1:35"),
    ('model M() { input x : f32[3, 2]; output y = swapaxes(x, 0, 2) }',
     "axis 2 is out of range for rank 2", "1:60"),
    # `...` stands for a function's leading dims only
    ('model M() { input x : f32[..., 3]; output y = x }',
     "`...` (any leading dims) is for the type of a function's argument or result", "1:23"),
    ('model M() { param W : f32[..., 3]; output y = sum(W) }',
     "`...` (any leading dims) is for the type of a function's argument or result", "1:23"),
    ('def f(x : f32[B, ...]) -> f32 { return sum(x) }',
     "`...` stands for any leading dims, first in the type of a function's", "1:18"),
    ('def f(x : f32[N]) -> f32[..., N] { return x }',
     "`...` in the result type of `f` is not bound by its arguments", "1:22"),
    ('model M() { input x : f32[3]; output y = x[...] }',
     "`...` is no index: a subscript names each axis (`x[:, 0]`)", "1:44"),
    ('def f(x : f32[..., I]) -> f32[...] { return x[..., 0] }',
     "`...` is no index: a subscript names each axis", "1:47"),
    ('model M() { input x : f32[3, 2]; output y = sum(x[0, ...]) }',
     "`...` is no index: a subscript names each axis", "1:54"),
    # a constructor's dims are no subscript: it said "`...` is no index"
    ('model M() { input x : f32[B, 4]; y = zeros[..., 4]; output z = sum(x) }',
     "`...` stands for any leading dims, first in the type of a function's argument", "1:44"),
]


@pytest.mark.parametrize("source, message, where", BAD_PROGRAMS,
                         ids=[f"bad{i}" for i in range(len(BAD_PROGRAMS))])
def test_bad_program_is_located(source, message, where):
    with pytest.raises(MdlError) as info:
        check_source(source, "t.mdl")
    first = info.value.diagnostics[0]
    assert message in first.message
    assert f"{first.loc.line}:{first.loc.col}" == where


@pytest.mark.parametrize("define", [{"C": float("nan")}, {"S": float("inf")},
                                    {"R": float("nan")}, {"U": -float("inf")}])
def test_an_initializer_or_regularizer_takes_finite_numbers(define):
    """A hyper-parameter may be inf or nan (`-D C=nan`), but an initializer's argument or a
    regularizer's strength must be finite: refused at the argument."""
    source = ("model M(C = 1.0, S = 0.5, R = 0.1, U = 1.0) {\n"
              "  scope s (regularizer = l2(R)) { param w : f32[3] = normal(0, S) }\n"
              "  param b : f32[3] = constant(C); param u : f32[3] = uniform(U, 2)\n"
              "  output y = w + b + u }")
    (name, value), = define.items()
    where = {"C": "3:31", "S": "2:64", "R": "2:29", "U": "3:62"}[name]
    with pytest.raises(MdlError) as info:
        check_source(source, "t.mdl", defines=define)
    first = info.value.diagnostics[0]
    assert first.message == f"expected a finite number, got {value}"
    assert f"{first.loc.line}:{first.loc.col}" == where



@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_constant_that_is_not_a_number_says_so(value):
    """A hyper-parameter given as nan or inf, where it meets a tensor: refused, saying what
    it is (a NaN was `past the range of f32, where it would be inf`)."""
    with pytest.raises(MdlError) as info:
        check_source("model M(C = 0.5) {\n  input x : f32[3]\n  output y = clip(x, C, 1.0) }",
                     "t.mdl", defines={"C": value})
    first = info.value.diagnostics[0]
    assert first.message == f"{value} is not a finite number"
    assert f"{first.loc.line}:{first.loc.col}" == "3:22"

def test_table_is_large_enough():
    assert len(BAD_PROGRAMS) >= 40


def test_rendering_has_location_line_and_caret():
    with pytest.raises(MdlError) as info:
        check_source("model M() {\n  input x : f32[B]\n  output y = x + z\n}", "m.mdl")
    text = info.value.render()
    assert text.splitlines() == [
        "m.mdl:3:18: error: unknown name `z`",
        " 3 |   output y = x + z",
        "   |                  ^",
    ]


@pytest.mark.parametrize("source", [
    "model M() {\f input x : f32[3]\n  output y = sum(xx)\n}",  # a form feed, U+2028,
    "# a\u2028b\nmodel M() {\n  output y = sum(xx)\n}",       # U+0085: inside a line
    "# a\x85b\nmodel M() {\n  output y = sum(xx)\n}",
    "# a\r\nmodel M() {\r\n  output y = sum(xx)\r\n}",      # CRLF, a lone CR: a break
    "# a\rmodel M() {\r  output y = sum(xx)\r}",
    "\ufeff# a\nmodel M() {\n  output y = sum(xx)\n}",           # a byte order mark
], ids=["formfeed", "u2028", "u0085", "crlf", "cr", "bom"])
def test_the_excerpt_is_the_line_the_lexer_counts(source):
    """The renderer's lines are the lexer's: a line ends at a line feed, a CRLF or a lone
    CR (as Python reads a file), not at the other breaks str.splitlines knows; a leading
    byte order mark is no character of the text."""
    with pytest.raises(MdlError) as info:
        check_source(source, "m.mdl")
    first = info.value.diagnostics[0]
    assert "unknown name `xx`" in first.message
    assert info.value.render().splitlines()[1] == f" {first.loc.line} |   output y = sum(xx)"


def test_control_characters_of_the_source_are_shown_as_replacement_characters():
    """The excerpt shows a NUL or an escape of the line as U+FFFD, column for column,
    rather than sending it to the terminal."""
    with pytest.raises(MdlError) as info:
        check_source('model M() {\n  assert 1 > 0, "a\x1b[2Jb"\n}', "m.mdl")
    assert info.value.render().splitlines()[1:] == [
        ' 2 |   assert 1 > 0, "a\ufffd[2Jb"',
        "   |                   ^",
    ]


def test_several_independent_errors_in_one_run():
    source = ("model M() {\n  input x : f32[B]\n  a = x + p\n  b = tanh(q)\n"
              "  c = a + b\n  output y = x\n}")
    with pytest.raises(MdlError) as info:
        check_source(source, "m.mdl")
    found = [(d.loc.line, d.message) for d in info.value.diagnostics]
    # c = a + b reads two poisoned names: no cascade error for it
    assert found == [(3, "unknown name `p`"), (4, "unknown name `q`")]


@pytest.mark.parametrize("call, where", [
    ("linear(x, 0)", "4:35"),                 # the model's own call
    ("twice(x)", "2:35"),                      # the call in the user's function
])
def test_an_error_inside_the_standard_library_is_shown_at_the_users_call(call, where):
    """`linear(x, 0)` was reported at std/rnn.mdl's `param W : f32[I, n]`, a line the
    user cannot change, with the call a note: the user's call is the place, the
    library's line (quoted) the note."""
    source = ('import "std/rnn.mdl"\n'
              "def twice(x : f32[B, I]) { return linear(x, 0) }\n"
              "model M() {\n  input x : f32[B, 4]; output y = " + call + "\n}")
    with pytest.raises(MdlError) as info:
        check_source(source, "m.mdl")
    [first] = info.value.diagnostics
    assert (first.message, f"{first.loc.line}:{first.loc.col}") == (
        "dims must be positive, got 0 (n = 0)", where)
    assert first.loc.source.path == "m.mdl"
    text, loc = first.notes[0]
    assert text == "found in the standard library, at `param W : f32[I, n] = uniform(-k, k)`"
    assert loc.source.library_name == "std/rnn.mdl"
    assert [note for note, _ in first.notes[1:]] == (
        ["in this call of `twice`"] if call == "twice(x)" else [])


@pytest.mark.parametrize("body, errors", [
    ("if sum(x) > 0.0 { yield x } else { yield -x }",
     [(3, 40, "`yield` must stand directly in the `for`"),
      (3, 57, "`yield` must stand directly in the `for`")]),
    ("scope s { yield x }", [(3, 32, "`yield` must stand directly in the body ")])])
def test_a_misplaced_yield_is_one_error_each_not_a_missing_yield_too(body, errors):
    """A yield in each branch of an if was reported twice, and a third error said the
    loop needs a `yield`; so did one in a `scope` block."""
    source = ("model M() {\n  input xs : f32[T, B]\n"
              f"  hs = for x in xs {{ {body} }}\n"
              "  output y = sum(hs)\n}")
    with pytest.raises(MdlError) as info:
        check_source(source, "m.mdl")
    found = [(d.loc.line, d.loc.col, d.message[:40]) for d in info.value.diagnostics]
    assert found == errors


@pytest.mark.parametrize("count, note", [(19, False), (20, True), (25, True)])
def test_the_checker_says_where_it_stopped_at_20_errors(count, note):
    """At 20 errors the checker stops: a last note says more may follow (it once ended
    at the 20th as if there were no more)."""
    lines = "".join(f"  y{i} = x + q{i}\n" for i in range(count))
    with pytest.raises(MdlError) as info:
        check_source(f"model M() {{\n  input x : f32[B]\n{lines}  output y = x\n}}", "m.mdl")
    found = info.value.diagnostics
    assert [d.message for d in found if d.severity == "error"] == \
        [f"unknown name `q{i}`" for i in range(min(count, 20))]
    assert (found[-1].severity == "note") == note
    if note:
        assert info.value.render().endswith(
            "\nnote: mdl stops at 20 errors: fix these, and check again for any more")


def test_unused_inputs_and_parameters_are_warnings():
    cm = check_source("model M() { input x : f32[B]; input u : f32[B]\n"
                      "  param w : f32[3]\n  output y = x }", "m.mdl")
    messages = sorted(w.message for w in cm.warnings)
    assert messages == ["input `u` is never used", "parameter `w` is never used"]
    assert all(w.severity == "warning" for w in cm.warnings)


@pytest.mark.parametrize("inputs, body, unused", [
    # the only input with T and B, read for them alone: removing it unbinds them
    ("input ids : i32[T, B]", "h = zeros[B, 3]\n  for t in range(T) { h = tanh(h + 1.0) }\n"
     "  output y = h", []),
    ("input ids : i32[T, B]", "output y = 1.0 / f32(T)", []),                 # T as a number
    ("input ids : i32[T, B]", "output y = zeros[4]", ["input `ids` is never used"]),
    # another input gives the same dims: this one is not needed for them
    ("input xs : f32[T, B]; input mask : f32[T, B]", "output y = xs",
     ["input `mask` is never used"]),
])
def test_an_input_read_only_for_its_dims_is_used(inputs, body, unused):
    cm = check_source(f"model M() {{ {inputs}\n  {body} }}", "m.mdl")
    assert sorted(w.message for w in cm.warnings) == unused


@pytest.mark.parametrize("body, unused", [
    ("ys = for x in xs { h = h + x; yield h }", []),            # the loop's first state
    ("ys = for x in xs { if x[0] > 0.0 { h = x }; yield h }", []),  # carried through
    ("ys = for x in xs { for z in xs { h = h * z }; yield h }", []),   # an inner loop's
    ("ys = for x in xs { h = x; yield h }", ["input `h` is never used"]),  # overwritten
    ("while sum(h) > 1.0 { h = 0.5 * h }; ys = xs", []),         # read by the condition
])
def test_an_input_that_starts_a_loops_state_is_used(body, unused):
    source = f"model M() {{ input h : f32[B]; input xs : f32[T, B]\n  {body}\n  output y = ys }}"
    cm = check_source(source, "m.mdl")
    assert sorted(w.message for w in cm.warnings) == unused


UNUSED = """
def twice(x : f32[N]) -> f32[N] {
  spare = tanh(x)
  kept = 2.0 * x
  return kept
}
model M() {
  input xs : f32[T, 4]
  h = zeros[4]
  hs = for x in xs {
    h = tanh(h + x)
    yield h
  }
  a = twice(h)
  b = twice(2.0 * h)
  c = exp(b)
  _d = exp(b)
  i, j = split(c, 2, axis = 0)
  e = sum(b)
  assert e > -1.0
  g = sin(b)
  for x in xs {
    g = g + x
  }
  output y = sum(i) + sum(g)
}
"""


def test_a_value_assigned_and_never_used_is_a_warning():
    """Where nothing reads it: no op, no loop or branch, no output. Named once where a
    function's local is unused at every call, at the caller where a function's result is
    the unused value; `_d` says it is unused on purpose, `i, j = ...` takes what it is
    given, and a loop's state (`g`) is read by its next step."""
    cm = check_source(UNUSED, "m.mdl")
    found = sorted((w.loc.line, w.loc.col, w.message) for w in cm.warnings)
    assert found == [(3, 3, "`spare` is assigned but never used"),
                     (10, 3, "`hs` is assigned but never used"),
                     (14, 3, "`a` is assigned but never used")]
    rendered = next(w for w in cm.warnings if "`hs`" in w.message).render()
    assert rendered.splitlines()[:3] == ["m.mdl:10:3: warning: `hs` is assigned but never used",
                                         " 10 |   hs = for x in xs {", "    |   ^^"]


@pytest.mark.parametrize("body, unused", [
    ("r = tanh(x); hs = r; output y = r", ["hs"]),  # once never warned: the value is used
    ("hs = x; output y = x", ["hs"]),               # an input's other name
    ("param w : f32[4] = ones; v = w; output y = sum(x) * w", ["v"]),  # a parameter's
    ("r = tanh(x); hs = r; output y = hs", []),     # r read by `hs = r`
    ("a = tanh(x); b = tanh(x); output y = b", ["a"]),  # two values
    ("h = x; for z in zs { g = tanh(h + z); h = g }; output y = h", []),  # the loop's state
    ("h = x; if sum(x) > 0.0 { h = x * 2.0 } else { g = h; h = g }; output y = h", []),
    ("y0 = twice(x); y1 = y0; output y = y0", ["y1"]),
    ("r = same(x); output y = r", [])])  # `b = a; return b` in a function, read
def test_an_alias_never_read_is_a_warning(body, unused):
    """`hs = r`: the value is used by its other name, so the rule by values missed it."""
    cm = check_source("def twice(a : f32[N]) -> f32[N] { return a * 2.0 }\n"
                      "def same(a : f32[N]) -> f32[N] { b = a; return b }\n"
                      "model M() { input x : f32[B]; input zs : f32[T, B]\n"
                      f"  {body}\n}}", "m.mdl")
    assert sorted(w.message for w in cm.warnings if "assigned" in w.message) == \
        [f"`{name}` is assigned but never used" for name in unused]


@pytest.mark.parametrize("cond, message", [
    ("sum(h) > 1.0 or true", "is always true: the loop would never end"),  # once ran on
    ("true or sum(h) > 1.0", "is always true: the loop would never end"),
    ("sum(h) > 1.0 and false", "is always false: its body would never run"),
    ("true", "is always true: the loop would never end")])
def test_a_while_whose_condition_is_decided_when_compiling_is_refused(cond, message):
    with pytest.raises(MdlError) as info:
        check_source("model M() { input x : f32[B]; h = x\n"
                     f"  while {cond} {{ h = 0.5 * h }}\n  output y = h }}", "m.mdl")
    assert info.value.message == f"this `while` condition {message}"


def test_and_or_of_a_bool_scalar_with_a_constant():
    """`c or true` is true and `c and false` false; `c and true` stays c, and a tensor's
    `or` keeps its shape."""
    cm = check_source("model M() { input x : f32[B]; c = sum(x) > 0.0; m = x > 0.0\n"
                      "  output a = c or true; output b = c and true; output t = m or true }")
    types = {k: str(v.type) for k, v in cm.graph.outputs.items()}
    assert types == {"a": "bool", "b": "bool", "t": "bool[B]"}


@pytest.mark.parametrize("branches, message", [
    ("{ h = 2.0 * x } else { h = nosuch * x }", "unknown name `nosuch`"),
    ("{ k = 2.0 * x }\n  output y = k", "`k` is assigned only in the then branch of the `if` "
     "at m.mdl:2:3; assign it in both branches to use it after")])
def test_an_if_on_c_or_true_is_a_runtime_if(branches, message):
    """`c or true` folded everywhere (for the `while` rule above) made such an `if` one
    decided when compiling: its else branch went unchecked, and a name its then branch
    assigns was readable after it. Outside a `while` condition it is a bool tensor's
    `or`, and the `if` a runtime one (a QA pass)."""
    with pytest.raises(MdlError) as info:
        check_source("model M() { input x : f32[B]; h = x\n"
                     f"  if sum(x) > 0.0 or true {branches}\n}}", "m.mdl")
    assert info.value.message == message


@pytest.mark.parametrize("body, message", [
    ("param t : f32[V, 4] = zeros; return a + sum(t)", "not the model's hyper-parameter `V`; "
     "pass it as an argument (`V : int`)"),
    ("return a + zeros[B]", "not the model's dim `B`; an argument's type binds it"),
    ("return a * x", "not the model's input `x`; pass it as an argument"),
    ("return a * h", "not the model's value `h`; pass it as an argument"),
    ("return a * q", "unknown name `q`")])  # nobody's: no such words
def test_a_function_naming_the_models_names_is_told_to_pass_them(body, message):
    """A QA pass: `unknown name V` in a function, V the model's hyper-parameter, with
    nothing in the docs saying a function sees its arguments only."""
    with pytest.raises(MdlError) as info:
        check_source(f"def f(a : f32[N]) -> f32[N] {{ {body} }}\n"
                     "model M(V = 3) { input x : f32[B]; h = x * 2.0; output y = f(x) + h }",
                     "m.mdl")
    assert message in info.value.message
    assert ("a function sees" in info.value.message) == ("`q`" not in message)


@pytest.mark.parametrize("body, message", [
    ("hs = for x in xs { h = tanh(x + h); yield h }; output y = hs",
     "unknown name `h`: the `for` at line 2 assigns it, but a loop's state needs a value "
     "before the loop: assign `h` before it"),
    ("g = xs[0]; while sum(k) < 3.0 { k = g; g = g * 2.0 }; output y = g",
     "unknown name `k`: the `while` at line 2 assigns it"),
    ("hs = for x in xs { h = f(x); yield h }; output y = hs", "unknown name `h`")])  # f's
def test_a_loops_state_read_before_the_loop_gives_it_a_value(body, message):
    """A QA pass: `h = gru(x, h)` with no `h` before the loop said only `unknown name h`."""
    with pytest.raises(MdlError) as info:
        check_source("def f(a : f32[N]) -> f32[N] { return a * h }\n"
                     f"model M() {{ input xs : f32[T, B]; {body} }}", "m.mdl")
    assert info.value.message.startswith(message)
    assert ("assigns it" in info.value.message) == ("line 2" in message)


@pytest.mark.parametrize("source, message", [
    # a name read before the statement that gives it its value
    ("model M() { input xs : f32[T, B]\n  output loss = mean(hs)\n  hs = tanh(xs) }",
     "unknown name `hs`: it is assigned at line 3, after this read; a name is read after the "
     "statement that assigns it"),
    ("model M() { input xs : f32[T, B]\n  y = xs * w\n  param w : f32[B]\n  output o = y }",
     "unknown name `w`: it is declared at line 3, after this read"),
    ("def f(a : f32[N]) -> f32[N] {\n  b = a * c\n  c = a\n  return b }\n"
     "model M() { input x : f32[N]; output y = f(x) }", "unknown name `c`: it is assigned at "
     "line 3"),
    # batch-first data with lengths: the loop steps over its first dim
    ("model M() { input xs : f32[B, T, 3]; input n : i32[B]; h = zeros[B, 3]\n"
     "  for x in xs (lengths = n) { h = h + x }\n  output y = h }",
     "lengths must be i32[T] (one per sequence), got i32[B]: a `for` steps over the first dim "
     "of `xs` and takes its second as the rows; for batch-first data, bind `transpose(xs, "
     "[1, 0, 2])` to a name and loop over that"),
    ("model M() { input x : f32[B, 4]; input y : f32[B]; output loss = mse(x, y) }",
     "`mse` takes two tensors whose shapes broadcast, got f32[B, 4] and f32[B]"),
    # a yield in a block of the loop's body
    ("model M() { input xs : f32[T, B]\n  ys = for x in xs { if sum(x) > 0.0 { yield x } "
     "else { yield -x } }\n  output y = ys }", "`yield` must stand directly in the `for`'s "
     "body: for a value of an `if`, assign it to a name in both branches and yield that name "
     "after it"),
    ("model M() { input xs : f32[T, B]\n  ys = for x in xs { i = 0; while i < 2 { i = i + "
     "1; yield x } }\n  output y = ys }", "for a value of a `while`, assign it to a name there"),
])
def test_a_first_users_mistakes_are_explained(source, message):
    """A QA pass writing models as a new user: each of these said less (`unknown name`,
    `lengths must be i32[T]` only, `-` needs shapes that broadcast, `yield` must stand in a
    `for` whose values are assigned, which this one was)."""
    with pytest.raises(MdlError) as info:
        check_source(source, "m.mdl")
    assert message in info.value.message


def test_long_lines_are_cut_around_the_caret():
    source = "model M() { input x : f32[B]; output y = " + "x + " * 80 + "zz }"
    with pytest.raises(MdlError) as info:
        check_source(source, "m.mdl")
    excerpt = info.value.render().splitlines()[1]
    assert len(excerpt) < 120 and "zz" in excerpt


@pytest.mark.parametrize("size, message", [
    (3, "`reshape` cannot turn f32[3] (3 elements) into shape [2, 1, 1, 1, 1, 1, 1, 1, ... "
        "(2000 dims)] (2 elements)"),
    (2, "f32[2, 1, 1, 1, 1, 1, 1, 1, ... (2000 dims)] has 2000 dims; a value has at most 8")],
    ids=["elements", "rank"])
def test_a_shape_of_thousands_of_dims_is_shown_by_its_first_eight(size, message):
    """A reshape to 100000 dims gave a message of 300 kB, every dim of the shape written."""
    dims = ", ".join(["2"] + ["1"] * 1999)
    with pytest.raises(MdlError) as info:
        check_source(f"model M() {{ input x : f32[{size}]; output y = reshape(x, [{dims}]) }}",
                     "m.mdl")
    assert info.value.diagnostics[0].message == message


def test_a_message_names_a_control_character_by_its_code_point():
    """`unexpected character` quoted the raw escape, which the terminal then acted on."""
    with pytest.raises(MdlError) as info:
        check_source('model M() {\n  input x : f32[3]\n  y = x\x1b[31m + 1.0\n}', "m.mdl")
    first = info.value.render().splitlines()[0]
    assert first == "m.mdl:3:8: error: unexpected character U+001B"


def test_the_caret_stands_under_its_spot_after_wide_characters():
    """A terminal shows each CJK character two columns wide; the caret counted them one."""
    with pytest.raises(MdlError) as info:
        check_source('model M() {\n  input x : f32[3]\n  assert sum(x) > 0.0, "中文"; '
                     'y = qq\n  output z = sum(y)\n}', "m.mdl")
    line, caret = info.value.render().splitlines()[1:3]
    assert line.endswith('"中文"; y = qq')
    assert caret.index("^") == len(line) and caret.endswith("^^")  # 2 wide: +2, qq: -2


def test_the_caret_counts_no_column_for_accents_and_marks_turn_no_text():
    """QA: combining accents and zero-width spaces took a column each (the caret stood 5
    to the right); a right-to-left override in a quoted message or the source line was
    printed raw, which made the text read otherwise."""
    with pytest.raises(MdlError) as info:
        check_source('model M() {\n  input x : f32[3]\n  assert sum(x) > 0.0, "e\u0301\u0301'
                     '\u200b"; y = qq\n  output z = sum(y)\n}', "m.mdl")
    line, caret = info.value.render().splitlines()[1:3]
    assert caret.index("^") == line.index("qq") - 3 and caret.endswith("^^")  # e + 3 marks
    with pytest.raises(MdlError) as info:
        check_source('model M(H = 3) {\n  assert H > 4, "\u202e}eurt{"\n}', "m.mdl")
    rendered = info.value.render()
    assert "\u202e" not in rendered
    assert "error: U+202E}eurt{: `H > 4` is always false" in rendered


def test_a_main_file_that_is_not_utf8_is_located(tmp_path):
    from dsl import check_file
    path = tmp_path / "surr.mdl"
    path.write_bytes(b"model M() {\n  input x : f32[3] # \xed\xa0\x80\n  output z = sum(x)\n}\n")
    with pytest.raises(MdlError) as info:
        check_file(str(path))
    rendered = info.value.render().splitlines()
    assert rendered[0] == f"{path}:2:22: error: `{path}` is not UTF-8 text"
    assert rendered[2] == "   |                      ^"


@pytest.mark.parametrize("terms, where", [
    (150, None),            # deep, within the limit: checked
    (199, "3:10"),          # the expression fits, its statement does not: the statement
    (260, "3:14"),          # the expression alone is too deep: where it starts
])
def test_a_source_nested_too_deeply_is_located(terms, where):
    """The limit keeps the checker's recursive walks off Python's stack limit; the error
    pointed at the model's `{` and did not say that a flat chain counts."""
    source = "model M() {\n  input x : f32[3]\n  output y = " + " + ".join(["x"] * terms) + "\n}"
    if where is None:
        check_source(source, "m.mdl")
        return
    with pytest.raises(MdlError) as info:
        check_source(source, "m.mdl")
    first = info.value.render().splitlines()[0]
    assert first.startswith(f"m.mdl:{where}: error: this is nested too deeply (more than 200 "
                            "levels: each operator of a chain like `a + b + c` one, each "
                            "block `{ ... }` in another two)"), first


@pytest.mark.parametrize("depth, fits", [(98, True), (99, False)])
def test_blocks_nest_99_deep_at_most(depth, fits):
    """99 scopes said "more than 200 levels, each operator of a chain ... one", naming no
    block: each counts two."""
    body = "scope a { " * depth + "y = x" + " }" * depth
    source = f"model M() {{\n  input x : f32[3]\n  {body}\n  output z = x\n}}"
    if fits:
        check_source(source, "m.mdl")
        return
    with pytest.raises(MdlError, match="each block `{ ... }` in another two"):
        check_source(source, "m.mdl")


def test_the_checkers_python_arguments_of_the_wrong_kind_are_refused(tmp_path):
    """QA: check_file(0) read stdin and closed it; check_source(None) read a file named
    `<string>`; a dtype or defines of the wrong kind raised KeyError or TypeError deep in."""
    import os

    from dsl import UsageError, check_file
    path = tmp_path / "m.mdl"
    path.write_text("model M(H = 2) { input x : f32[H]; output y = x }")
    with pytest.raises(TypeError, match="path takes a file's path"):
        check_file(0)
    os.fstat(0)  # still open
    with pytest.raises(TypeError, match="takes the source as a str, got NoneType"):
        check_source(None)
    for options, message in [({"dtype": "f16"}, "dtype 'f16': expected one of f32, f64"),
                             ({"defines": "H=5"}, "defines takes a {name: value} dict"),
                             ({"defines": {3: 1}}, "defines takes a {name: value} dict"),
                             ({"model": ["M"]}, "model takes a model's name")]:
        with pytest.raises(UsageError) as info:
            check_file(str(path), **options)
        assert message in str(info.value)


def test_a_function_local_one_model_reads_is_not_warned_for_the_file():
    """A function's local that M2's call leaves unread and M1's reads: checking the whole
    file (mdlc check, a build of every model) warned of it; each model alone is right."""
    from dsl import SourceFile, file_warnings
    text = ("def f(x : f32[N], k : int) -> f32[N] {\n  a = 2.0 * x\n"
            "  if k > 0 { y = a } else { y = x }\n  return y\n}\n"
            "model M1() { input x : f32[3]; output y = f(x, 1) }\n"
            "model M2() { input x : f32[3]; output y = f(x, 0) }\n"
            "model M3() { input x : f32[3]; output y = f(x, 0) }\n")
    source = SourceFile("m.mdl", text)
    m1, m2, m3 = (source.check(name) for name in ("M1", "M2", "M3"))
    unused = "m.mdl:2:3: warning: `a` is assigned but never used"
    assert [w.render().splitlines()[0] for w in m2.warnings] == [unused]
    assert file_warnings([m1, m2, m3]) == []
    assert [w.render().splitlines()[0] for w in file_warnings([m2, m3])] == [unused]
