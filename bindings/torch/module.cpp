// The Python module optcast_torch: importing it registers backend "optcast" with
// torch.distributed (PyTorch 1.13: Backend.register_backend(name, func), func called as
// func(prefix_store, rank, size, timeout) by init_process_group and new_group).
#include <chrono>

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include "process_group.hpp"

namespace py = pybind11;
using optcast::torch_backend::process_group;

PYBIND11_MODULE(optcast_torch, m) {
  m.doc() = "optcast's collectives as a torch.distributed backend: import optcast_torch, then "
            "dist.init_process_group(\"optcast\", ...)";
  // torch's ProcessGroup and Store types must be known to pybind11 before ours derives.
  auto dist = py::module_::import("torch.distributed");
  py::class_<process_group, c10d::ProcessGroup, c10::intrusive_ptr<process_group>>(m, "ProcessGroupOptcast")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<process_group>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>());
  auto create = py::cpp_function(
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
        return c10::make_intrusive<process_group>(store, rank, size, timeout);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::call_guard<py::gil_scoped_release>());
  m.attr("create_process_group") = create;
  dist.attr("Backend").attr("register_backend")("optcast", create);
}
