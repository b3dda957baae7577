  // ---------------------------------------------------------------- go

  renderHeader();
  renderHeadline();
  renderAccounting();
  renderCluster();
  renderGaps();
  renderFindings();
  renderCriticalPath();
  renderTimeline();
  renderNamedTable("op_statistic", "No operator statistic.");
  renderNamedTable("op_summary", "No operator.");
  renderNamedTable("kernel_details", "No kernel.");
  renderNamedTable("api_statistic", "No runtime API call.");
  renderTransfers();
  renderNamedTable("communication", "No communication in this profile.");
  renderCounters();
  document.body.setAttribute("data-ready", "true");
})();
