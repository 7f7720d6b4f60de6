/**
 * @stormlog/core/testing: the collector contract as a test suite, for adapter authors. It registers
 * its tests with the `describe`/`it` you pass (vitest, jest, node:test) and needs no assertion library.
 */
export {
  CollectorContractError,
  type CollectorContractOptions,
  type CollectorContractSuiteOptions,
  type CollectorFactory,
  type ContractTestFunctions,
  type ContractViolation,
  checkCollectorContract,
  checkSampleResult,
  describeCollectorContract,
} from "./collector-contract.js";
