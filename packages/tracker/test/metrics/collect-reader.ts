import { AggregationTemporality, MetricReader } from "@opentelemetry/sdk-metrics";

/** A metric reader collected when the caller wants (an application's exporter would collect on a timer). */
export class CollectOnDemandReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE });
  }
  protected onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
  protected onShutdown(): Promise<void> {
    return Promise.resolve();
  }
}
