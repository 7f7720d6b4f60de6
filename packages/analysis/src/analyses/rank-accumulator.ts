/**
 * The base of the report's analyses: each keeps its work on a rank apart from what it keeps, so
 * that ranks can be analysed on two threads (`index/rank-parts.ts`). Its own module: the analyses
 * extend it, and `analysis.ts` imports them.
 */
import type { RankData } from "./analysis.js";

/**
 * An analysis whose work on a rank (`rankPart`) is apart from what it keeps (`addPart`): the part
 * is plain data that depends on the rank and the plan only, so that a scan worker can compute the
 * parts of some ranks while this thread does others (`rank-parts.ts`); parts added in rank order
 * give the same result as `addRank` on each rank.
 */
export abstract class RankAccumulator<Result, Part, Input = RankData> {
  abstract rankPart(data: Input): Part;
  abstract addPart(part: Part): void;
  abstract finish(): Result;

  addRank(data: Input): void {
    this.addPart(this.rankPart(data));
  }
}
