/**
 * Small numeric helpers that reproduce what the Python reference gets from NumPy and SciPy, so that
 * rounded outputs agree: NumPy's pairwise summation (`np.sum`/`np.mean`), sample standard deviation
 * (`np.std(ddof=1)`), `scipy.stats.linregress` with its two-sided p-value, and Python's `round()`.
 */
import { pythonFormatFixed } from "@stormlog/core/internal";
import { selectKth } from "@stormlog/phases/internal";
import { scratchDoubles } from "../scratch.js";

/** NumPy's unrolled block size for pairwise summation (`PW_BLOCKSIZE`). */
const PAIRWISE_BLOCK = 128;

function pairwise(values: ArrayLike<number>, start: number, n: number): number {
  if (n < 8) {
    let sum = -0; // NumPy starts from -0.0 so that a sum of -0.0 values stays -0.0
    for (let i = start; i < start + n; i++) sum += values[i]!;
    return sum;
  }
  if (n <= PAIRWISE_BLOCK) {
    let r0 = values[start]!;
    let r1 = values[start + 1]!;
    let r2 = values[start + 2]!;
    let r3 = values[start + 3]!;
    let r4 = values[start + 4]!;
    let r5 = values[start + 5]!;
    let r6 = values[start + 6]!;
    let r7 = values[start + 7]!;
    const unrolled = n - (n % 8);
    let i = 8;
    for (; i < unrolled; i += 8) {
      const at = start + i;
      r0 += values[at]!;
      r1 += values[at + 1]!;
      r2 += values[at + 2]!;
      r3 += values[at + 3]!;
      r4 += values[at + 4]!;
      r5 += values[at + 5]!;
      r6 += values[at + 6]!;
      r7 += values[at + 7]!;
    }
    let sum = r0 + r1 + (r2 + r3) + (r4 + r5 + (r6 + r7));
    for (; i < n; i++) sum += values[start + i]!;
    return sum;
  }
  let half = Math.floor(n / 2);
  half -= half % 8;
  return pairwise(values, start, half) + pairwise(values, start + half, n - half);
}

/** `np.sum` of a float64 array: NumPy's pairwise summation, bit for bit. */
export function sum(values: ArrayLike<number>): number {
  // np.add.reduce starts from the identity 0.0, then adds the pairwise sum.
  return 0 + pairwise(values, 0, values.length);
}

/** `np.mean`: the pairwise sum divided by the count. NaN for an empty input. */
export function mean(values: ArrayLike<number>): number {
  return sum(values) / values.length;
}

/**
 * `np.std(values, ddof)`: the square root of the pairwise sum of squared deviations from the
 * mean, divided by `n - ddof`. The default `ddof = 1` is the sample standard deviation.
 */
export function std(values: ArrayLike<number>, ddof = 1): number {
  const n = values.length;
  const m = mean(values);
  const squares = scratchDoubles("stats.squares", n);
  for (let i = 0; i < n; i++) {
    const d = values[i]! - m;
    squares[i] = d * d;
  }
  return Math.sqrt(sum(squares) / Math.max(n - ddof, 0));
}

/** Index of the first largest value (`np.argmax`), -1 for an empty input. */
export function argmax(values: ArrayLike<number>): number {
  let best = -1;
  for (let i = 0; i < values.length; i++) {
    const value = values[i]!;
    if (Number.isNaN(value)) return i; // NumPy returns the first NaN
    if (best === -1 || value > values[best]!) best = i;
  }
  return best;
}

/** The result of `linregress`, named as SciPy names it. */
export interface LinearRegression {
  readonly slope: number;
  readonly intercept: number;
  readonly rvalue: number;
  readonly pvalue: number;
  readonly stderr: number;
  readonly interceptStderr: number;
}

/** SciPy's guard against division by zero in the t statistic. */
const TINY = 1.0e-20;

/**
 * `scipy.stats.linregress(x, y)` (two-sided). Returns null where SciPy raises: fewer than two
 * points, mismatched lengths, or all `x` equal. Sums follow NumPy's order except the covariance
 * dot products, which NumPy hands to BLAS; those may differ in the last bits.
 */
export function linregress(x: ArrayLike<number>, y: ArrayLike<number>): LinearRegression | null {
  const n = x.length;
  if (n < 2 || y.length !== n) return null;
  let allEqual = true;
  for (let i = 1; i < n && allEqual; i++) if (x[i] !== x[0]) allEqual = false;
  if (allEqual) return null;

  const xmean = mean(x);
  const ymean = mean(y);
  // np.cov(x, y, bias=1): centred products summed, then scaled by 1/n.
  let sxx = 0;
  let sxy = 0;
  let syy = 0;
  for (let i = 0; i < n; i++) {
    const dx = x[i]! - xmean;
    const dy = y[i]! - ymean;
    sxx += dx * dx;
    sxy += dx * dy;
    syy += dy * dy;
  }
  const scale = 1 / n;
  const ssxm = sxx * scale;
  const ssxym = sxy * scale;
  const ssym = syy * scale;

  let r: number;
  if (ssxm === 0 || ssym === 0) {
    r = ssxym === 0 ? Number.NaN : 0;
  } else {
    r = ssxym / Math.sqrt(ssxm * ssym);
    if (r > 1) r = 1;
    else if (r < -1) r = -1;
  }
  const slope = ssxym / ssxm;
  const intercept = ymean - slope * xmean;
  if (n === 2) {
    return { slope, intercept, rvalue: r, pvalue: y[0] === y[1] ? 1 : 0, stderr: 0, interceptStderr: 0 };
  }
  const df = n - 2;
  const t = r * Math.sqrt(df / ((1 - r + TINY) * (1 + r + TINY)));
  const pvalue = 2 * studentTSurvival(Math.abs(t), df);
  const stderr = Math.sqrt(((1 - r ** 2) * ssym) / ssxm / df);
  return {
    slope,
    intercept,
    rvalue: r,
    pvalue,
    stderr,
    interceptStderr: stderr * Math.sqrt(ssxm + xmean ** 2),
  };
}

/**
 * P(T > t) for Student's t with `df` degrees of freedom (SciPy's `stdtr(df, -t)`), through the
 * regularized incomplete beta function: for t >= 0 it is I_{df/(df+t^2)}(df/2, 1/2) / 2.
 */
export function studentTSurvival(t: number, df: number): number {
  if (Number.isNaN(t) || !(df > 0)) return Number.NaN;
  if (t === Number.POSITIVE_INFINITY) return 0;
  if (t === Number.NEGATIVE_INFINITY) return 1;
  const tt = t * t;
  // x and 1 - x computed separately to keep precision at both ends.
  const x = df / (df + tt);
  const oneMinusX = tt / (df + tt);
  const tail = 0.5 * regularizedIncompleteBeta(df / 2, 0.5, x, oneMinusX);
  return t >= 0 ? tail : 1 - tail;
}

/** ln Γ(z) for z > 0 (Lanczos, g = 7, n = 9; ~15 significant digits). */
function logGamma(z: number): number {
  if (z < 0.5) return Math.log(Math.PI / Math.sin(Math.PI * z)) - logGamma(1 - z);
  const c = [
    0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
    12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7,
  ];
  const w = z - 1;
  let a = c[0]!;
  const g = 7;
  for (let i = 1; i < 9; i++) a += c[i]! / (w + i);
  const tt = w + g + 0.5;
  return 0.5 * Math.log(2 * Math.PI) + (w + 0.5) * Math.log(tt) - tt + Math.log(a);
}

/** Continued fraction of the incomplete beta function (modified Lentz). */
function betaContinuedFraction(a: number, b: number, x: number): number {
  const tiny = 1e-300;
  const qab = a + b;
  const qap = a + 1;
  const qam = a - 1;
  let c = 1;
  let d = 1 - (qab * x) / qap;
  if (Math.abs(d) < tiny) d = tiny;
  d = 1 / d;
  let h = d;
  for (let m = 1; m <= 10_000; m++) {
    const m2 = 2 * m;
    let aa = (m * (b - m) * x) / ((qam + m2) * (a + m2));
    d = 1 + aa * d;
    if (Math.abs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (Math.abs(c) < tiny) c = tiny;
    d = 1 / d;
    h *= d * c;
    aa = (-(a + m) * (qab + m) * x) / ((a + m2) * (qap + m2));
    d = 1 + aa * d;
    if (Math.abs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (Math.abs(c) < tiny) c = tiny;
    d = 1 / d;
    const delta = d * c;
    h *= delta;
    if (Math.abs(delta - 1) < 1e-16) break;
  }
  return h;
}

/** I_x(a, b), the regularized incomplete beta function; `oneMinusX` is 1 - x computed precisely. */
function regularizedIncompleteBeta(a: number, b: number, x: number, oneMinusX: number): number {
  if (x <= 0) return 0;
  if (oneMinusX <= 0) return 1;
  const logFront = logGamma(a + b) - logGamma(a) - logGamma(b) + a * Math.log(x) + b * Math.log1p(-x);
  const logFrontPrecise =
    x > 0.5
      ? logGamma(a + b) - logGamma(a) - logGamma(b) + a * Math.log1p(-oneMinusX) + b * Math.log(oneMinusX)
      : logFront;
  const front = Math.exp(logFrontPrecise);
  if (x < (a + 1) / (a + b + 2)) return (front * betaContinuedFraction(a, b, x)) / a;
  return 1 - (front * betaContinuedFraction(b, a, oneMinusX)) / b;
}

/**
 * Python's `round(x, digits)`: the decimal rounded half-to-even on the exact binary value, read back
 * as the nearest double (JavaScript's `toFixed` rounds exact ties away from zero).
 */
export function pythonRound(x: number, digits: number): number {
  if (!Number.isFinite(x)) return x;
  if (Math.abs(x) >= 2 ** 52) return x; // already an integer; no fractional digits to round
  return Number(pythonFormatFixed(x, digits));
}

// Python's `collections.Counter.most_common` and `statistics.median`, as the reference's cross-rank code calls them.

/**
 * `Counter(...).most_common(1)[0][0]`: the key with the highest count; on ties the first seen, which
 * is the entries' order unless `seenBefore` says otherwise. Undefined for no entries.
 */
export function mostCommon<K>(
  entries: Iterable<readonly [K, number]>,
  seenBefore?: (a: K, b: K) => boolean,
): K | undefined {
  let best: K | undefined;
  let bestCount = 0;
  for (const [key, count] of entries) {
    if (
      count > bestCount ||
      (count === bestCount && best !== undefined && seenBefore?.(key, best) === true)
    ) {
      best = key;
      bestCount = count;
    }
  }
  return best;
}

/** `int((a + b) / 2)` as Python computes it for two exact integers held in doubles. */
export function halfSum(a: number, b: number): bigint {
  const total = a + b <= Number.MAX_SAFE_INTEGER ? a + b : Number(BigInt(a) + BigInt(b));
  return BigInt(Math.trunc(total / 2));
}

/**
 * The k-th smallest (0-based, `k < values.length`) of 32-bit values by counting, 16 bits at a time:
 * two passes over them with no data-dependent swaps, which a cold process runs several times faster
 * than a selection (the cross-rank analysis takes the median gap of every sample of a job). The
 * values stay in their order.
 */
function selectKthUint32(values: Uint32Array, k: number): number {
  const counts = new Uint32Array(65536);
  for (let i = 0; i < values.length; i++) counts[values[i]! >>> 16]!++;
  let high = 0;
  let below = 0;
  while (below + counts[high]! <= k) below += counts[high++]!;
  counts.fill(0);
  for (let i = 0; i < values.length; i++) {
    const value = values[i]!;
    if (value >>> 16 === high) counts[value & 0xffff]!++;
  }
  let low = 0;
  while (below + counts[low]! <= k) below += counts[low++]!;
  return high * 65536 + low;
}

/**
 * `int(statistics.median(values))` of exact integers: held in 32-bit integers, in doubles (reordered
 * in place), or as bigints when they pass 2^53.
 */
export function integerMedian(values: Float64Array | Uint32Array | bigint[]): bigint {
  const n = values.length;
  if (Array.isArray(values)) {
    values.sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
    if (n % 2 === 1) return values[n >> 1]!;
    return BigInt(Math.trunc(Number(values[(n >> 1) - 1]! + values[n >> 1]!) / 2));
  }
  if (values instanceof Uint32Array && n > 0) {
    const b = selectKthUint32(values, n >> 1);
    return n % 2 === 1 ? BigInt(b) : halfSum(selectKthUint32(values, (n >> 1) - 1), b);
  }
  if (n % 2 === 1) return BigInt(selectKth(values, n >> 1));
  const b = selectKth(values, n >> 1);
  // Everything before the upper middle is at most it: the lower middle is their largest.
  let a = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < n >> 1; i++) if (values[i]! > a) a = values[i]!;
  return halfSum(a, b);
}
