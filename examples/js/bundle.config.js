// How `jco componentize --bundle` joins app.js, weft_sdk.js and whatever they import (other
// files, npm packages in node_modules/) into the one module the JavaScript engine runs. The
// host's interfaces (`weft:plugin/...`, like `wasi:...`) stay imports of the component.
export default {
  external: [/^weft:/],
};
