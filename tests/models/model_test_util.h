// Helpers shared by the model tests: build a zoo model (failing the test on an error), or get the
// error a bad configuration reports.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "models/zoo.h"

namespace kiln::testing_models {

using Settings = std::vector<models::Setting>;

inline ir::Graph build(std::string_view model, const Settings &settings) {
  Expected<ir::Graph> g = models::buildModel(model, settings);
  EXPECT_TRUE(g.ok()) << g.error().message;
  return g.ok() ? std::move(*g) : ir::Graph();
}

inline std::string buildError(std::string_view model, const Settings &settings) {
  Expected<ir::Graph> g = models::buildModel(model, settings);
  return g.ok() ? "<built>" : g.error().message;
}

} // namespace kiln::testing_models
