"""The simulated world the demo and the tests run in - never part of a real study.

- :mod:`crowdpref.simulation.crowd`: the simulated crowd (writers and raters) with its hidden
  truth, which claims and answers work like people do;
- :mod:`crowdpref.simulation.arrivals`: how its people reach their work (straight into the
  collection, or through the fake Prolific and the portal);
- :mod:`crowdpref.simulation.prolific_server`: a fake Prolific that follows Prolific's published
  API (``python -m crowdpref.simulation.prolific_server``, started by ``crowdpref demo``);
- :mod:`crowdpref.simulation.prolific_contract`: the check of every exchange of that fake against
  Prolific's published OpenAPI document (``prolific-openapi.yml`` beside it, its provenance and
  quirks in ``prolific-openapi.md``), with openapi-core from the ``test`` extra.

Nothing is imported here: the contract needs openapi-core, which an installed package may lack.
"""
