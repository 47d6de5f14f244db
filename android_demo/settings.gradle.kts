// OmniDraft Android demo: a chat app running an exported OmniDraft bundle with ExecuTorch.
pluginManagement {
    repositories {
        google()
        mavenCentral()
        gradlePluginPortal()
    }
}
dependencyResolutionManagement {
    repositories {
        google()
        mavenCentral()
    }
}
rootProject.name = "omnidraft-demo"
include(":core", ":app")
